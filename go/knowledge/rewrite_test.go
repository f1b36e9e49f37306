package knowledge

import (
	"errors"
	omlet "example.invalid/omlet/go"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPlaceholdersAreRewrittenOutsideQuotes(t *testing.T) {
	sql, order := rewritePlaceholders("select a from t where x = :b and y = ':a' and z = :a and w = :b and v = :nope", []string{"a", "b"}, Question)
	if sql != "select a from t where x = ? and y = ':a' and z = ? and w = ? and v = :nope" || !reflect.DeepEqual(order, []int{1, 0, 1}) {
		t.Fatal(sql, order)
	}
	sql, order = rewritePlaceholders("select a from t where lo <= :ip and hi >= :ip_2", []string{"ip", "ip_2"}, Dollar)
	if sql != "select a from t where lo <= $1 and hi >= $2" || !reflect.DeepEqual(order, []int{0, 1}) {
		t.Fatal(sql, order)
	}
}

func TestHelpersAreQualifiedOrWrittenOutInAnyCase(t *testing.T) {
	sql, err := Postgres.RewriteSQL("select a from t where IP4_INT(c) = Cidr4_Min(:n) and x = 'IP4_INT(c)'")
	if err != nil || sql != "select a from t where pg_temp.ip4_int(c) = pg_temp.cidr4_min(:n) and x = 'IP4_INT(c)'" {
		t.Fatal(sql, err)
	}
	upper, _ := MySQL.RewriteSQL("select name from hosts where IP4_INT(addr) = Ip4_Int(:ip)")
	lower, _ := MySQL.RewriteSQL("select name from hosts where ip4_int(addr) = ip4_int(:ip)")
	if upper != lower || strings.Contains(strings.ToLower(upper), "ip4_int") {
		t.Fatal(upper)
	}
	keep := func(name string, args []string) string { return "<" + name + "(" + strings.Join(args, ",") + ")>" }
	got, _ := rewriteHelperCalls("IP4_INT(a) = Trim_Quotes (b) and xIP4_INT(c) = t.ip4_int(d) and 'IP4_INT(e)' = ip4_intx(f)", keep)
	if got != "<ip4_int(a)> = <trim_quotes(b)> and xIP4_INT(c) = t.ip4_int(d) and 'IP4_INT(e)' = ip4_intx(f)" {
		t.Fatal(got)
	}
	if s, _ := SQLite.RewriteSQL("select a from t where ip4_int(c) = :x"); s != "select a from t where ip4_int(c) = :x" {
		t.Fatal(s)
	}
}

func TestTheRewriteIsBoundedInSizeAndDepth(t *testing.T) {
	arg := "addr"
	for range 12 {
		arg = "ip4_int(" + arg + ")"
	}
	start := time.Now()
	_, err := MySQL.RewriteSQL("select name from hosts where " + arg + " = 1")
	if !errors.Is(err, ErrTooLong) || time.Since(start) > 2*time.Second {
		t.Fatal(err, time.Since(start))
	}
	okSQL, err := MySQL.RewriteSQL("select name from hosts where ip4_int(trim_quotes(addr)) = 1")
	if err != nil || len(okSQL) > 4096 || strings.Contains(okSQL, "trim_quotes(") {
		t.Fatal(okSQL, err)
	}
	deep := strings.Repeat("trim_quotes(", 100) + "x" + strings.Repeat(")", 100)
	if _, err := rewriteHelperCalls(deep, func(n string, a []string) string { return n }); !errors.Is(err, ErrTooDeep) {
		t.Fatal(err)
	}
}

func TestMissingIPv6HelpersAreNamed(t *testing.T) {
	if h := helperMissingIn([]string{"ip4_int", "cidr_contains"}, "postgres"); h != "cidr_contains" {
		t.Fatal(h)
	}
	if h := helperMissingIn([]string{"ip_key"}, "mysql"); h != "" {
		t.Fatal(h)
	}
	if h := helperMissingIn([]string{"cidr_min_key"}, "sqlite"); h != "" {
		t.Fatal(h)
	}
}

// Answers of omlet_lang::pipes::helper, for the inputs that tell the
// parsers apart.
func TestHelpersGiveTheGuestsAnswers(t *testing.T) {
	c := func(name string, args ...any) string {
		var cells []omlet.Cell
		for _, a := range args {
			switch v := a.(type) {
			case string:
				cells = append(cells, text(v))
			case int:
				cells = append(cells, integer(int64(v)))
			case float64:
				cells = append(cells, omlet.Cell{Kind: 2, Real: v})
			case nil:
				cells = append(cells, null)
			}
		}
		r := Helper(name, cells)
		switch r.Kind {
		case 1:
			return fmt.Sprint(r.Int)
		case 3:
			return "'" + r.Text + "'"
		}
		return "null"
	}
	for _, tc := range []struct{ got, want string }{
		{c("ip4_int", "10.0.0.1"), "167772161"},
		{c("ip4_int", " 10.0.0.1\t"), "167772161"},
		{c("ip4_int", "010.0.0.1"), "0"},
		{c("ip4_int", "1.2.3"), "0"},
		{c("ip4_int", "256.0.0.1"), "0"},
		{c("ip4_int", 4294967295), "4294967295"},
		{c("ip4_int", 4294967296), "0"},
		{c("ip4_int", 1.0), "0"},
		{c("ip4_between", "10.0.0.5", "10.0.0.1", "10.0.0.9"), "1"},
		{c("ip4_between", "10.0.0.5", "x", "10.0.0.9"), "0"},
		{c("cidr4_min", "10.1.2.3/8"), "167772160"},
		{c("cidr4_max", "10.1.2.3/8"), "184549375"},
		{c("cidr4_min", "10.1.2.3/+8"), "167772160"},
		{c("cidr4_min", "0.0.0.0/0"), "0"},
		{c("cidr4_max", "0.0.0.0/0"), "4294967295"},
		{c("cidr4_min", "10.1.2.3/33"), "null"},
		{c("cidr4_min", "10.1.2.3 /8"), "null"},
		{c("cidr4_min", "10.1.2.3"), "null"},
		{c("cidr4_contains", "10.1.2.3", "10.0.0.0/8"), "1"},
		{c("cidr4_contains", 167838211, "10.0.0.0/8"), "1"},
		{c("cidr4_contains", "11.1.2.3", "10.0.0.0/8"), "0"},
		{c("ip4_text", 167772161), "'10.0.0.1'"},
		{c("ip4_text", -1), "null"},
		{c("ip4_text", "10.0.0.1"), "null"},
		{c("trim_quotes", "'a'"), "'a'"},
		{c("trim_quotes", "\"a\""), "'a'"},
		{c("trim_quotes", "'a\""), "''a\"'"},
		{c("trim_quotes", "'"), "'''"},
		{c("trim_quotes", 5), "5"},
		{c("ip_key", "10.0.0.1"), "'00000000000000000000ffff0a000001'"},
		{c("ip_key", "::ffff:10.0.0.1"), "'00000000000000000000ffff0a000001'"},
		{c("ip_key", " 2001:db8::1 "), "'20010db8000000000000000000000001'"},
		{c("ip_key", "fe80::1%eth0"), "null"},
		{c("ip_key", 167772161), "'00000000000000000000ffff0a000001'"},
		{c("cidr_min_key", "2001:db8::/32"), "'20010db8000000000000000000000000'"},
		{c("cidr_max_key", "2001:db8::/32"), "'20010db8ffffffffffffffffffffffff'"},
		{c("cidr_max_key", "10.0.0.0/8"), "'00000000000000000000ffff0affffff'"},
		{c("cidr_min_key", "10.0.0.1"), "null"},
		{c("cidr_min_key", "10.0.0.0/033"), "null"},
		{c("cidr_contains", "2001:db8::5", "2001:db8::/32"), "1"},
		{c("cidr_contains", "10.1.1.1", "10.0.0.0/8"), "1"},
		{c("cidr_contains", "10.1.1.1", "::ffff:10.0.0.0/104"), "1"},
		{c("cidr_contains", "2001:db9::5", "2001:db8::/32"), "0"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}

func TestPasswordsAreRedacted(t *testing.T) {
	for text, want := range map[string]string{
		"postgres://omlet:s3cr%40t@db:5432/intel":                                 "postgres://omlet:***@db:5432/intel",
		"mysql://root@127.0.0.1:3306/demo":                                        "mysql://root@127.0.0.1:3306/demo",
		"unsupported knowledge URL `oracle://scott:tiger@h/x?password=tiger&x=1`": "unsupported knowledge URL `oracle://scott:***@h/x?password=***&x=1`",
		"host=h user=u password=hunter2 dbname=d":                                 "host=h user=u password=*** dbname=d",
		"host=h password='a b c' dbname=d":                                        "host=h password=*** dbname=d",
		"postgres://db/x?sslpassword=k3y&sslmode=require":                         "postgres://db/x?sslpassword=***&sslmode=require",
		"bypass=1 compass=2 password=":                                            "bypass=1 compass=2 password=***",
		"no url here: a:b@c":                                                      "no url here: a:b@c",
	} {
		if got := Redact(text); got != want {
			t.Errorf("%s: %s", text, got)
		}
	}
	for _, secret := range []string{"se/cret", "se#cret", "se cret", "se@cret", "p@ss w/rd#1?`"} {
		r := Redact("postgres://omlet:" + secret + "@db:5432/intel")
		if strings.Contains(r, secret) || !strings.Contains(r, ":***@db") {
			t.Errorf("%s: %s", secret, r)
		}
	}
}
