//! The guard on statements it must accept and statements it must refuse.

use super::*;

/// The guard's verdict with its refusal as text, which these tests read.
fn check(sql: &str, policy: &Policy) -> Result<Checked, String> {
    super::check(sql, policy).map_err(|r| r.message)
}

fn ok(sql: &str) -> bool {
    check(sql, &Policy::default()).is_ok()
}

#[test]
fn the_compilers_statements_pass() {
    assert!(ok("select zone from ip_zone where ip = :ip"));
    assert!(ok("select * from test where id = 1 and name = :name"));
    assert!(ok("select a,b from t where (lo <= :ip and hi >= :ip) or not x != 'it''s'"));
    assert!(ok("select zone from zone where ip_start_int <= :ip and 1 = ip4_between(:ip, lo, hi)"));
    assert!(ok("select z from t where cidr4_contains(net, :ip) = 1 and v = -1.5e3 and w = null"));
    assert!(ok("select z from t where n = trim_quotes('\\')"), "a backslash is a character");
}

#[test]
fn in_lists_hold_values_and_index_their_column() {
    assert!(ok("select owner from assets where ip in (:sip, :dip, 'x', 3)"));
    assert!(ok("select owner from assets where ip in (ip4_int(:a)) and team = :t"));
    assert!(!ok("select owner from assets where ip in (team)"), "a column in the list compares two columns");
    assert!(!ok("select owner from assets where ip in :a"));
    assert!(!ok("select owner from assets where ip in (:a"));
    assert!(!ok("select owner from assets where :a in (:b)"));
    let c = check("select owner from assets where ip in (:sip, :dip)", &Policy::default()).unwrap();
    assert_eq!(c.keys, vec!["ip".to_string()]);
    assert!(c.terms.is_none(), "an in list is no in-memory key");
}

#[test]
fn a_network_lookup_is_a_term_for_memory() {
    let terms = |sql: &str| check(sql, &Policy::default()).unwrap().terms;
    let cidr4 = Some(vec![Term { column: "cidr".into(), op: "cidr4".into(), param: "ip".into() }]);
    assert_eq!(terms("select zone from nets where cidr4_contains(:ip, cidr) = 1"), cidr4);
    assert_eq!(terms("select zone from nets where 1 = CIDR4_CONTAINS(:ip, cidr)"), cidr4);
    assert_eq!(terms("select zone from nets where cidr4_contains(cidr, :ip) = 1"), None, "the helper reads (ip, cidr)");
    assert_eq!(terms("select zone from nets where cidr4_contains(:ip, cidr) = 2"), None);
    assert_eq!(terms("select zone from nets where cidr4_contains(:ip, cidr) != 1"), None);
    assert_eq!(terms("select zone from nets where ip4_int(cidr4_contains(:ip, cidr)) = 1"), None);
}

#[test]
fn order_by_and_limit_close_a_statement() {
    let c = check("select zone from r where lo <= :ip and hi >= :ip order by lo desc, hi limit 1", &Policy::default()).unwrap();
    assert_eq!((c.order.as_deref(), c.limited, c.plain), (Some(" order by lo desc, hi"), true, true));
    assert!(c.terms.is_some(), "an ordered lookup may still be answered from memory when one row matches");
    assert!(ok("select zone from r where ip = :ip limit 1"));
    assert!(ok("select zone from r where ip = :ip order by zone asc"));
    for bad in [
        "select zone from r where ip = :ip order by",
        "select zone from r where ip = :ip order by current_user",
        "select zone from r where ip = :ip order by ip4_int(zone)",
        "select zone from r where ip = :ip limit :n",
        "select zone from r where ip = :ip limit 1 order by zone",
        "select zone from r where ip = :ip order by zone; drop table r",
    ] {
        assert!(!ok(bad), "{bad}");
    }
}

#[test]
fn aggregates_sub_queries_and_like_pass_with_their_limits() {
    assert!(ok("select count(ip),max(owner) from assets where ip in (:sip, :dip)"));
    assert!(ok("select group_concat(distinct kind), count(*) from assets where team = :team"));
    assert!(ok("select string_agg(distinct kind, ', ') from assets where team = :team"));
    assert!(ok("select owner from (select owner,ip from assets) a where ip = :ip"));
    assert!(ok("select owner from (select owner,ip from (select * from assets) as x) where ip = :ip"));
    assert!(ok("select owner from assets where team like '%' || :team || '%' and kind like :k"));
    assert!(ok("select owner from assets where team like 'net%'"));
    for bad in [
        "select pg_read_file(owner) from assets where ip = :ip",
        "select count(distinct *) from assets where ip = :ip",
        "select count(ip, owner) from assets where ip = :ip",
        "select count(ip, :x) from assets where ip = :ip",
        "select owner from (select owner from assets where ip = :ip) a where ip = :ip",
        "select owner from (select owner from pg_authid) a where ip = :ip",
        "select owner from (select owner from assets) union where ip = :ip",
        "select owner from assets where team like owner",
        "select owner from assets where :x like team",
        "select owner from assets where team like :a || owner",
        "select owner from assets where a = :a || :b",
    ] {
        assert!(!ok(bad), "{bad}");
    }
    let c = check("select owner from (select owner,ip from assets) a where ip = :ip", &Policy::default()).unwrap();
    assert_eq!((c.table.as_str(), c.plain, c.terms.is_none()), ("assets", false, true), "the innermost table; no batching");
    let c = check("select count(ip) from assets where ip = :ip", &Policy::default()).unwrap();
    assert_eq!((c.plain, c.keys.clone()), (false, vec!["ip".to_string()]), "an aggregate is not plain, and its key is indexed");
    let listed = Policy { functions: vec!["array_agg".into()], ..Policy::default() };
    assert!(check("select array_agg(owner) from assets where ip = :ip", &listed).is_ok());
}

#[test]
fn the_top_level_comparisons_say_what_an_index_should_hold() {
    let cols = |sql: &str| {
        let c = check(sql, &Policy::default()).unwrap();
        (c.keys, c.ranges)
    };
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(cols("select zone from ip_zone where ip = :ip"), (v(&["ip"]), v(&[])));
    assert_eq!(cols("select z from t where :a = a and b = 'x' and c != 1"), (v(&["a", "b"]), v(&[])));
    assert_eq!(
        cols("select zone,owner from ip_zone where lo_int <= :client_ip and hi_int >= :client_ip_2"),
        (v(&[]), v(&["lo_int", "hi_int"]))
    );
    assert_eq!(cols("select z from t where :ip >= lo and ip4_int(:x) < hi"), (v(&[]), v(&["lo", "hi"])));
    // A column inside a call, an `or`, a `not` or parentheses: no index.
    assert_eq!(cols("select z from t where cidr4_contains(net, :ip) = 1"), (v(&[]), v(&[])));
    assert_eq!(cols("select z from t where a = :a or b = :b"), (v(&[]), v(&[])));
    assert_eq!(cols("select z from t where not a = :a and (b = :b)"), (v(&[]), v(&[])));
    assert_eq!(cols("select z from t where a = b"), (v(&[]), v(&[])));
}

#[test]
fn anything_else_is_refused() {
    for bad in [
        "select zone from t where ip = :ip; drop table t",
        "select zone from t where ip = :ip union select secret from secrets",
        "select zone from t where ip = concat('\\', ') union select 1 -- ')",
        "select zone from t where ip = :ip -- comment",
        "select zone from t where ip = :ip /* c */",
        "select zone from t where ip = (select secret from s)",
        "select zone from t where ip = :ip into outfile '/tmp/x'",
        "select zone from t where ip = \"x\"",
        "select zone from t where ip = pg_read_file(:path)",
        "select zone from t where 1 = sleep(:s)",
        "select zone from t where load_file('/etc/passwd') = :x",
        "select zone from pg_catalog.pg_authid where ip = :ip",
        "select t.zone from t where ip = :ip",
        "select zone from t where ip = 'open",
        "delete from t where 1 = 1",
    ] {
        assert!(!ok(bad), "{bad}");
    }
}

#[test]
fn the_config_allows_functions_and_limits_tables() {
    let p =
        Policy { tables: Some(vec!["ip_zone".into(), "geo.city".into()]), functions: vec!["lower".into()], ..Policy::default() };
    assert!(check("select zone from ip_zone where lower(name) = :n", &p).is_ok());
    assert!(check("select zone from other where name = :n", &p).unwrap_err().contains("`other`"));
    let e = check("select zone from ip_zon where name = :n", &p).unwrap_err();
    assert!(e.contains("(ip_zone, geo.city); did you mean `ip_zone`?"), "{e}");
    assert!(check("select c from geo.city where id = :id", &p).is_ok(), "a qualified name listed exactly");
    let c = check("select a, b from ip_zone where x = :x", &p).unwrap();
    assert_eq!((c.table.as_str(), c.columns), ("ip_zone", vec!["a".to_string(), "b".to_string()]));
    assert!(check("select zone from ip_zone where upper(name) = :n", &p).unwrap_err().contains("`upper`"));
}

/// Issue 30: catalog tables, unqualified or listed in `tables`, are
/// refused; user tables with similar names are not.
#[test]
fn catalog_tables_are_refused_whatever_tables_says() {
    let catalog = [
        "pg_authid",
        "pg_shadow",
        "PG_SETTINGS",
        "pg_proc",
        "pg_roles",
        "pg_user",
        "pg_database",
        "pg_stat_activity",
        "pg_catalog.pg_authid",
        "public.pg_user",
        "information_schema.tables",
        "Information_Schema.columns",
        "sqlite_master",
        "sqlite_schema",
        "SQLITE_TEMP_MASTER",
        "main.sqlite_master",
        "pragma_table_list",
        "pragma_function_list",
        "mysql.user",
        "MySQL.global_priv",
        "performance_schema.threads",
        "sys.session",
    ];
    for table in catalog {
        let sql = format!("select a from {table} where b = :b");
        let e = check(&sql, &Policy::default()).unwrap_err();
        assert!(e.contains("catalog"), "{table}: {e}");
        let listed = Policy { tables: Some(vec![table.to_string()]), ..Policy::default() };
        let e = check(&sql, &listed).unwrap_err();
        assert!(e.contains("catalog") && e.contains("even when `tables` lists it"), "{table}: {e}");
    }
    for table in ["pgx", "my_pg_stats", "sqlitex", "mysql_hosts", "sys_events", "pragma", "users"] {
        assert!(ok(&format!("select a from {table} where b = :b")), "{table}");
    }
    let listed = Policy { tables: Some(vec!["geo.city".into(), "app.sys_log".into()]), ..Policy::default() };
    assert!(check("select a from geo.city where b = :b", &listed).is_ok());
    assert!(check("select a from app.sys_log where b = :b", &listed).is_ok());
}

/// Issue 30: words the database reads as the session's user, role,
/// database or schema are neither columns nor tables.
#[test]
fn session_words_are_not_columns() {
    for bad in [
        "select zone from t where name = current_user",
        "select zone from t where CURRENT_USER = :n",
        "select current_user from t where id = :id",
        "select zone from t where user = :u",
        "select zone from t where session_user = 'postgres'",
        "select zone from t where system_user <> :u",
        "select zone from t where current_role = :r",
        "select zone from t where current_catalog = :c",
        "select zone from t where current_schema = :s",
        "select zone from t where current_database = :d",
        "select zone from t where not (id = 1 or user = :u)",
        "select * from current_user where 1 = 1",
        "select * from session_user where 1 = 1",
    ] {
        let e = check(bad, &Policy::default()).unwrap_err();
        assert!(e.contains("function of the session"), "{bad}: {e}");
    }
    assert!(ok("select zone from t where username = :u and user_id = 1 and current_users = 2"));
    // A bare `user` is the session's user on PostgreSQL only; elsewhere a column.
    let on = |database| Policy { database, ..Policy::default() };
    for (database, refused) in [("postgres", true), ("", true), ("sqlite", false), ("mysql", false)] {
        for sql in ["select team from teams where user = :u", "select user from teams where id = :id"] {
            assert_eq!(check(sql, &on(database)).is_err(), refused, "{database}: {sql}");
        }
        assert!(check("select a from t where current_user = :u", &on(database)).is_err(), "{database}");
    }
    assert!(check("select * from user where 1 = 1", &on("postgres")).unwrap_err().contains("function of the session"));
}

/// Issue 30: a statement nesting 50,000 parentheses overflowed the
/// reader's stack (the process aborted); now it is refused.
#[test]
fn deep_nesting_is_refused_not_a_crash() {
    let nested = |open: &str, n: usize, close: &str| format!("select a from t where {}x = 1{}", open.repeat(n), close.repeat(n));
    // Over the byte bound.
    let e = check(&nested("(", 50_000, ")"), &Policy::default()).unwrap_err();
    assert!(e.contains("at most 65536"), "{e}");
    // Within it, over the depth bound.
    for sql in [nested("(", 30_000, ")"), nested("not ", 15_000, ""), nested("not (", 10_000, ")")] {
        assert!(sql.len() <= MAX_STATEMENT_BYTES);
        let e = check(&sql, &Policy::default()).unwrap_err();
        assert!(e.contains("nested more than 64 deep"), "{e}");
    }
    let p = Policy { functions: vec!["f".into()], ..Policy::default() };
    let calls = format!("select a from t where x = {}1{}", "f(".repeat(10_000), ")".repeat(10_000));
    assert!(check(&calls, &p).unwrap_err().contains("nested too deep"));
    // At the bound, it passes.
    assert!(ok(&nested("(", MAX_DEPTH, ")")));
    assert!(!ok(&nested("(", MAX_DEPTH + 1, ")")));
    assert!(ok(&nested("not ", MAX_DEPTH, "")));
}

/// Trust round 3: SQLite's `dbstat` (every page of the file), its
/// `sqlite_*` tables and `pragma_*` functions are catalog tables too,
/// whatever their case, schema or sub-query; `json_each`-like names of
/// user tables are not.
#[test]
fn sqlite_catalog_tables_and_functions_are_refused() {
    let listed = |t: &str| Policy { tables: Some(vec![t.to_string()]), database: "sqlite", ..Policy::default() };
    for table in [
        "dbstat",
        "DBSTAT",
        "main.dbstat",
        "temp.dbstat",
        "sqlite_dbpage",
        "sqlite_stat1",
        "sqlite_stat4",
        "sqlite_schema",
        "sqlite_temp_master",
        "temp.sqlite_temp_schema",
        "pragma_table_info",
        "pragma_index_list",
        "Pragma_Database_List",
    ] {
        for sql in [format!("select a from {table} where b = :b"), format!("select a from (select a from {table}) x where 1 = 1")]
        {
            let e = check(&sql, &listed(table)).unwrap_err();
            assert!(e.contains("catalog") && e.contains("even when `tables` lists it"), "{sql}: {e}");
        }
    }
    for table in ["dbstats", "my_dbstat", "json_each_log"] {
        assert!(ok(&format!("select a from {table} where b = :b")), "{table}");
    }
}

/// Trust round 3: on MySQL and MariaDB a schema is a database, and a
/// provider reads only the one its URL names: `otherdb.t` is refused, even
/// when `tables` lists it or the database is one a knowdb names
/// (`qualified`); unqualified names pass. Elsewhere qualified names stay
/// as they were.
#[test]
fn mysql_lookups_stay_in_the_urls_database() {
    let mysql = |tables: Option<Vec<String>>, qualified| Policy { tables, database: "mysql", qualified, ..Policy::default() };
    for p in [mysql(None, true), mysql(Some(vec!["otherdb.t".into(), "t".into()]), false), mysql(None, false)] {
        let e = check("select a from otherdb.t where b = :b", &p).unwrap_err();
        assert!(e.contains("names the database `otherdb`") && e.contains("write `t`"), "{e}");
        let e = check("select a from (select a from otherdb.t) x where 1 = 1", &p).unwrap_err();
        assert!(e.contains("names the database `otherdb`"), "{e}");
        assert!(check("select a from t where b = :b", &p).is_ok());
    }
    // The system schemas stay catalog tables (the message says so).
    let e = check("select a from mysql.user where b = :b", &mysql(None, true)).unwrap_err();
    assert!(e.contains("catalog"), "{e}");
    // PostgreSQL's schemas are not databases: as before.
    let pg = Policy { database: "postgres", qualified: true, ..Policy::default() };
    assert!(check("select a from public.t where b = :b", &pg).is_ok());
}
