package omlet

import (
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// Every kind, nested, so that writing, reading and the payload sizes stay
// in step (guest/lang/src/frame.rs's sample, in Go).
func everyKind() Record {
	return NewRecord(
		F("s", Chars("héllo")),
		F("d", Digit(-42)),
		F("f", Float(1.5)),
		F("b", Bool(true)),
		F("v4", IP(netip.MustParseAddr("10.0.0.1"))),
		F("v6", IP(netip.MustParseAddr("2001:db8::1"))),
		F("t", Time(1_700_000_000_000_000_000)),
		F("n", Null()),
		F("i", Ignore()),
		F("o", Obj(F("a", Array(Digit(1), Chars("x"))), F("z", Null()))),
		F("big", BigInt("18446744073709551616")),
	)
}

func TestFramesRoundTrip(t *testing.T) {
	recs := []Record{everyKind(), NewRecord(), NewRecord(F("x", Digit(1)))}
	b, err := EncodeFrame(recs...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got[1].Fields) != 0 {
		t.Fatalf("got %d records", len(got))
	}
	for i := range recs {
		want := recs[i]
		if len(want.Fields) == 0 {
			continue
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("record %d:\n got %#v\nwant %#v", i, got[i], want)
		}
	}
	// The header: 3 records, the node counts (nested nodes counted).
	if b[0] != 3 || b[12] != 15 {
		t.Fatalf("header % x", b[:16])
	}
}

func TestDamagedFramesAreRefusedWithoutPanicking(t *testing.T) {
	good, _ := EncodeFrame(everyKind())
	for cut := 0; cut < len(good); cut++ {
		if _, err := DecodeFrame(good[:cut]); err == nil {
			t.Fatalf("a frame cut at %d reads", cut)
		}
	}
	for i := range good {
		for _, v := range []byte{0, 1, 0x7f, 0xff} {
			bad := append([]byte(nil), good...)
			bad[i] = v
			_, _ = DecodeFrame(bad)
		}
	}
	if _, err := DecodeFrame(append(good, 0)); err == nil || err.Error() != "frame length does not match its header" {
		t.Fatalf("a long frame: %v", err)
	}
	// Nesting past 128 levels is refused.
	v := Null()
	for i := 0; i < 200; i++ {
		v = Array(v)
	}
	deep, _ := EncodeFrame(NewRecord(F("x", v)))
	if _, err := DecodeFrame(deep); err == nil || !strings.Contains(err.Error(), "deeper than 128") {
		t.Fatalf("deep: %v", err)
	}
	if _, err := EncodeFrame(NewRecord(F("b", BigInt("007")))); err == nil {
		t.Fatal("a bigint that is not canonical was written")
	}
}

func TestJSONIsReadAsOmletReadsIt(t *testing.T) {
	r, err := ParseRecord([]byte(`{"b":1,"a":{"z":1,"y":[1,{"k":2,"j":3}],"z":2},"b":2,"big":18446744073709551616,` +
		`"neg":-9223372036854775809,"max":9223372036854775807,"f":1.0,"e":1e2,"z":-0,"s":"\u00e9\n\ud83d\ude00","n":null,"t":true}`))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, f := range r.Fields {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "b,a,big,neg,max,f,e,z,s,n,t" {
		t.Fatalf("order: %v", names)
	}
	check := func(name string, want Value) {
		t.Helper()
		got, _ := r.Get(name)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %#v, want %#v", name, got, want)
		}
	}
	check("b", Digit(2))
	// Members sorted by name, the last of a name kept; arrays in order.
	check("a", Obj(F("y", Array(Digit(1), Obj(F("j", Digit(3)), F("k", Digit(2))))), F("z", Digit(2))))
	check("big", BigInt("18446744073709551616"))
	check("neg", BigInt("-9223372036854775809"))
	check("max", Digit(math.MaxInt64))
	check("f", Float(1))
	check("e", Float(100))
	check("s", Chars("é\n😀"))
	check("n", Null())
	check("t", Bool(true))
	if z, _ := r.Get("z"); z.Kind != KindFloat || !math.Signbit(z.Float) {
		t.Fatalf("-0: %#v", z)
	}
	for text, want := range map[string]string{
		`[1]`:          "a record must be a JSON object",
		`{"a":1,}`:     "invalid JSON: trailing comma at line 1 column 8",
		`{"a":01}`:     "invalid JSON: invalid number at line 1 column 7",
		`{"a":1} x`:    "invalid JSON: trailing characters at line 1 column 9",
		`{"a"`:         "invalid JSON: EOF while parsing an object at line 1 column 4",
		`{"a":"\u12"}`: "invalid JSON: invalid escape at line 1 column 12",
	} {
		if _, err := ParseRecord([]byte(text)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", text, err, want)
		}
	}
}

func TestJSONIsWrittenAsOmletWritesIt(t *testing.T) {
	cases := []struct {
		v    Value
		want string
	}{
		{Float(1), "1.0"},
		{Float(math.Copysign(0, -1)), "-0.0"},
		{Float(0.1), "0.1"},
		{Float(1e-7), "0.0000001"},
		{Float(1e23), "99999999999999991611392.0"},
		{Float(123456.789), "123456.789"},
		{Float(math.NaN()), "null"},
		{Float(math.Inf(-1)), `"-Infinity"`},
		{Chars("q\"b\\s\b\f\n\r\t\x01\x1f\x7fé"), `"q\"b\\s\b\f\n\r\t\u0001\u001f` + "\x7fé\""},
		{IP(netip.MustParseAddr("::ffff:1.2.3.4")), `"::ffff:1.2.3.4"`},
		{IP(netip.MustParseAddr("2001:db8:0:0:1:0:0:1")), `"2001:db8::1:0:0:1"`},
		{IP(netip.MustParseAddr("192.168.0.1")), `"192.168.0.1"`},
		{Time(0), `"1970-01-01 00:00:00"`},
		{Time(1_700_000_000_123_000_000), `"2023-11-14 22:13:20.123"`},
		{Time(1_500), `"1970-01-01 00:00:00.000001500"`},
		{Time(-1), `"1969-12-31 23:59:59.999999999"`},
		{Time(math.MinInt64), `"1677-09-21 00:12:43.145224192"`},
		{BigInt("-123456789012345678901"), "-123456789012345678901"},
		{Array(Ignore(), Null()), `["",null]`},
		{Obj(F("k", Ignore())), `{"k":null}`},
	}
	for _, c := range cases {
		if got := c.v.JSON(); got != c.want {
			t.Errorf("%#v: %s, want %s", c.v, got, c.want)
		}
	}
	r := NewRecord(F("a", Digit(1)), F("hidden", Ignore()), F("b\n", Chars("x")))
	if got := r.JSON(); got != `{"a":1,"b\n":"x"}` {
		t.Fatalf("record: %s", got)
	}
}
