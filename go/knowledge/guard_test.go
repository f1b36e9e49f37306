package knowledge

import (
	"strings"
	"testing"
)

func ok(sql string) bool {
	_, err := Check(sql, &Policy{})
	return err == nil
}

// Cases from host/knowledge/src/guard/tests.rs.
func TestTheGuardReadsTheCompilersLookupsOnly(t *testing.T) {
	for _, good := range []string{
		"select zone from ip_zone where ip = :ip",
		"select * from test where id = 1 and name = :name",
		"select a,b from t where (lo <= :ip and hi >= :ip) or not x != 'it''s'",
		"select zone from zone where ip_start_int <= :ip and 1 = ip4_between(:ip, lo, hi)",
		"select z from t where cidr4_contains(net, :ip) = 1 and v = -1.5e3 and w = null",
		`select z from t where n = trim_quotes('\')`,
		"select owner from assets where ip in (:sip, :dip, 'x', 3)",
		"select owner from assets where ip in (ip4_int(:a)) and team = :t",
		"select zone from r where lo <= :ip and hi >= :ip order by lo desc, hi limit 1",
		"select zone from r where ip = :ip order by zone asc",
		"select count(ip),max(owner) from assets where ip in (:sip, :dip)",
		"select group_concat(distinct kind), count(*) from assets where team = :team",
		"select string_agg(distinct kind, ', ') from assets where team = :team",
		"select owner from (select owner,ip from assets) a where ip = :ip",
		"select owner from (select owner,ip from (select * from assets) as x) where ip = :ip",
		"select owner from assets where team like '%' || :team || '%' and kind like :k",
		"SELECT zone FROM ip_zone WHERE IP4_INT(ip) = :ip",
	} {
		if !ok(good) {
			_, err := Check(good, &Policy{})
			t.Errorf("%s: %v", good, err)
		}
	}
	for _, bad := range []string{
		"select owner from assets where ip in (team)",
		"select owner from assets where ip in :a",
		"select owner from assets where ip in (:a",
		"select owner from assets where :a in (:b)",
		"select zone from r where ip = :ip order by",
		"select zone from r where ip = :ip order by current_user",
		"select zone from r where ip = :ip order by ip4_int(zone)",
		"select zone from r where ip = :ip limit :n",
		"select zone from r where ip = :ip limit 1 order by zone",
		"select zone from r where ip = :ip order by zone; drop table r",
		"select pg_read_file(owner) from assets where ip = :ip",
		"select count(distinct *) from assets where ip = :ip",
		"select count(ip, owner) from assets where ip = :ip",
		"select owner from (select owner from assets where ip = :ip) a where ip = :ip",
		"select owner from (select owner from pg_authid) a where ip = :ip",
		"select owner from (select owner from assets) union where ip = :ip",
		"select owner from assets where team like owner",
		"select owner from assets where :x like team",
		"select owner from assets where a = :a || :b",
		"select zone from t where ip = :ip; drop table t",
		"select zone from t where ip = :ip union select secret from secrets",
		`select zone from t where ip = concat('\', ') union select 1 -- ')`,
		"select zone from t where ip = :ip -- comment",
		"select zone from t where ip = :ip /* c */",
		"select zone from t where ip = (select secret from s)",
		"select zone from t where ip = :ip into outfile '/tmp/x'",
		`select zone from t where ip = "x"`,
		"select zone from t where ip = pg_read_file(:path)",
		"select zone from t where 1 = sleep(:s)",
		"select zone from pg_catalog.pg_authid where ip = :ip",
		"select t.zone from t where ip = :ip",
		"select zone from t where ip = 'open",
		"delete from t where 1 = 1",
		"select zone from user where a = :a",
		"select current_user from t where a = :a",
		"select zone from t where " + strings.Repeat("(", 70) + "a = :a" + strings.Repeat(")", 70),
	} {
		if ok(bad) {
			t.Errorf("%s: accepted", bad)
		}
	}
	// `user` is a column on MySQL and SQLite, the session's user on PostgreSQL.
	if _, err := Check("select user from t where a = :a", &Policy{Database: "mysql"}); err != nil {
		t.Error(err)
	}
	if _, err := Check("select user from t where a = :a", &Policy{Database: "postgres"}); err == nil {
		t.Error("user read as a column on postgres")
	}
}

func TestTablesAndFunctionsComeFromThePolicy(t *testing.T) {
	p := &Policy{Tables: []string{"ip_zone", "geo.city"}, Functions: []string{"lower"}}
	if _, err := Check("select zone from ip_zone where lower(name) = :n", p); err != nil {
		t.Error(err)
	}
	_, err := Check("select zone from ip_zon where name = :n", p)
	if err == nil || !strings.Contains(err.Error(), "(ip_zone, geo.city); did you mean `ip_zone`?") {
		t.Error(err)
	}
	if _, err := Check("select c from geo.city where id = :id", p); err != nil {
		t.Error("a qualified name listed exactly:", err)
	}
	c, err := Check("select a, b from ip_zone where x = :x", p)
	if err != nil || c.Table != "ip_zone" || strings.Join(c.Columns, ",") != "a,b" {
		t.Error(c, err)
	}
	_, err = Check("select zone from ip_zone where upper(name) = :n", p)
	if r, isRefusal := err.(*Refusal); !isRefusal || r.Function != "upper" {
		t.Error(err)
	}
	if _, err := Check("select a from geo.city where b = :b", &Policy{}); err == nil {
		t.Error("an unlisted qualified name was read")
	}
	if _, err := Check("select a from geo.city where b = :b", &Policy{Database: "mysql", Tables: []string{"geo.city"}}); err == nil {
		t.Error("another MySQL database was read")
	}
	c, _ = Check("select z from t where ip4_int(a) = :x and cidr_contains(:y, n) = 1 and IP4_INT(b) = 1", &Policy{})
	if strings.Join(c.Calls, ",") != "ip4_int,cidr_contains" {
		t.Error(c.Calls)
	}
}

func TestCatalogTablesAreRefusedWhateverTablesSays(t *testing.T) {
	for _, table := range []string{
		"pg_authid", "pg_shadow", "PG_SETTINGS", "pg_stat_activity", "pg_catalog.pg_authid", "public.pg_user",
		"information_schema.tables", "Information_Schema.columns", "sqlite_master", "SQLITE_TEMP_MASTER",
		"main.sqlite_master", "pragma_table_list", "mysql.user", "MySQL.global_priv", "performance_schema.threads",
		"sys.session", "dbstat",
	} {
		sql := "select a from " + table + " where b = :b"
		for _, p := range []*Policy{{}, {Tables: []string{table}, Qualified: true}} {
			_, err := Check(sql, p)
			if err == nil || !strings.Contains(err.Error(), "catalog") {
				t.Errorf("%s: %v", table, err)
			}
		}
	}
	for _, table := range []string{"pgx", "my_pg_stats", "sqlitex", "mysql_hosts", "sys_events", "pragma", "users"} {
		if !ok("select a from " + table + " where b = :b") {
			t.Errorf("%s refused", table)
		}
	}
}

func TestStatementsAreBoundedInLength(t *testing.T) {
	long := "select a from t where b = '" + strings.Repeat("x", MaxStatementBytes) + "'"
	if _, err := Check(long, &Policy{}); err == nil || !strings.Contains(err.Error(), "at most 65536") {
		t.Error(err)
	}
}
