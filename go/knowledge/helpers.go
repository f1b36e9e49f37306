package knowledge

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	omlet "example.invalid/omlet/go"
)

// HelperFunctions are the OML helper functions of spec §8.11.4, by their
// SQL names, in the order of guest/lang/src/ir.rs `Helper::ALL`.
var HelperFunctions = []string{
	"ip4_int", "ip4_between", "cidr4_min", "cidr4_max", "cidr4_contains", "ip4_text",
	"trim_quotes", "ip_key", "cidr_min_key", "cidr_max_key", "cidr_contains",
}

// helperArity is how many arguments each helper takes.
func helperArity(name string) int {
	switch name {
	case "ip4_between":
		return 3
	case "cidr4_contains", "cidr_contains":
		return 2
	}
	return 1
}

// Helper computes an OML helper function over cells, as the guest does
// (omlet_lang::pipes::helper): 0 for a bad address, NULL for a bad
// network. The SQLite provider registers these as SQL functions; the
// PostgreSQL and MySQL dialects write SQL that gives the same answers.
// An unknown name gives NULL.
func Helper(name string, args []omlet.Cell) omlet.Cell {
	arg := func(i int) omlet.Cell {
		if i < len(args) {
			return args[i]
		}
		return omlet.Cell{Kind: omlet.CellNull}
	}
	integer := func(i int64) omlet.Cell { return omlet.Cell{Kind: omlet.CellInteger, Int: i} }
	boolean := func(b bool) omlet.Cell {
		if b {
			return integer(1)
		}
		return integer(0)
	}
	null := omlet.Cell{Kind: omlet.CellNull}
	switch name {
	case "ip4_int":
		ip, ok := cellIPv4(arg(0))
		if !ok {
			return integer(0)
		}
		return integer(int64(ip))
	case "ip4_between":
		ip, ok1 := cellIPv4(arg(0))
		lo, ok2 := cellIPv4(arg(1))
		hi, ok3 := cellIPv4(arg(2))
		return boolean(ok1 && ok2 && ok3 && lo <= ip && ip <= hi)
	case "cidr4_min", "cidr4_max":
		lo, hi, ok := cidr4(arg(0))
		if !ok {
			return null
		}
		if name == "cidr4_min" {
			return integer(int64(lo))
		}
		return integer(int64(hi))
	case "cidr4_contains":
		ip, ok1 := cellIPv4(arg(0))
		lo, hi, ok2 := cidr4(arg(1))
		return boolean(ok1 && ok2 && lo <= ip && ip <= hi)
	case "ip4_text":
		c := arg(0)
		if c.Kind != omlet.CellInteger || c.Int < 0 || c.Int > 0xFFFF_FFFF {
			return null
		}
		return omlet.Cell{Kind: omlet.CellText, Text: ipv4Text(uint32(c.Int))}
	case "trim_quotes":
		c := arg(0)
		if c.Kind != omlet.CellText {
			return c
		}
		s := c.Text
		if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
			return omlet.Cell{Kind: omlet.CellText, Text: s[1 : len(s)-1]}
		}
		return c
	case "ip_key":
		k, ok := cellIP(arg(0))
		if !ok {
			return null
		}
		return keyText(k)
	case "cidr_min_key", "cidr_max_key":
		lo, hi, ok := cidr(arg(0))
		if !ok {
			return null
		}
		if name == "cidr_min_key" {
			return keyText(lo)
		}
		return keyText(hi)
	case "cidr_contains":
		ip, ok1 := cellIP(arg(0))
		lo, hi, ok2 := cidr(arg(1))
		return boolean(ok1 && ok2 && !less(ip, lo) && !less(hi, ip))
	}
	return null
}

// u128 is a 128-bit address (IPv4 mapped into IPv6), high half first.
type u128 struct{ hi, lo uint64 }

func less(a, b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

func mask128(prefix int) u128 {
	var m u128
	switch {
	case prefix <= 0:
	case prefix < 64:
		m.hi = ^uint64(0) << (64 - prefix)
	case prefix == 64:
		m.hi = ^uint64(0)
	default:
		if prefix > 128 {
			prefix = 128
		}
		m.hi = ^uint64(0)
		m.lo = ^uint64(0) << (128 - prefix)
	}
	return m
}

func keyText(k u128) omlet.Cell {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return omlet.Cell{Kind: omlet.CellText, Text: hex.EncodeToString(b[:])}
}

func addrKey(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func v4Key(n uint32) u128 { return u128{0, 0xffff_0000_0000 | uint64(n)} }

func ipv4Text(n uint32) string {
	return strconv.Itoa(int(n>>24)) + "." + strconv.Itoa(int(n>>16&255)) + "." +
		strconv.Itoa(int(n>>8&255)) + "." + strconv.Itoa(int(n&255))
}

// parseIPv4 reads four decimal octets of one to three digits, none above
// 255 and none with a leading zero (what Rust's Ipv4Addr parser accepts).
func parseIPv4(s string) (uint32, bool) {
	if len(s) < 7 || len(s) > 15 {
		return 0, false
	}
	var out uint32
	i := 0
	for n := 0; n < 4; n++ {
		if n > 0 {
			if i >= len(s) || s[i] != '.' {
				return 0, false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if i-start == 3 {
				return 0, false
			}
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || (i-start > 1 && s[start] == '0') || v > 255 {
			return 0, false
		}
		out = out<<8 | uint32(v)
	}
	return out, i == len(s)
}

// parseIP reads an address of either family, surrounding whitespace
// trimmed, as Rust's IpAddr parser does (no zone).
func parseIP(s string) (u128, bool) {
	if n, ok := parseIPv4(s); ok {
		return v4Key(n), true
	}
	return parseAddr(strings.TrimSpace(s))
}

// parseAddr reads an address exactly as written: dotted IPv4 or IPv6.
func parseAddr(s string) (u128, bool) {
	if n, ok := parseIPv4(s); ok {
		return v4Key(n), true
	}
	if strings.ContainsAny(s, "%") || !strings.Contains(s, ":") {
		return u128{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return u128{}, false
	}
	return addrKey(a), true
}

// cellIPv4 is an IPv4 address as the ip4_* and cidr4_* helpers read it:
// dotted text (trimmed) or an integer in range.
func cellIPv4(c omlet.Cell) (uint32, bool) {
	switch c.Kind {
	case omlet.CellText:
		return parseIPv4(strings.TrimSpace(c.Text))
	case omlet.CellInteger:
		if c.Int >= 0 && c.Int <= 0xFFFF_FFFF {
			return uint32(c.Int), true
		}
	}
	return 0, false
}

// cellIP is an address of either family as its IPv6 number (IPv4 mapped).
func cellIP(c omlet.Cell) (u128, bool) {
	switch c.Kind {
	case omlet.CellText:
		return parseIP(c.Text)
	case omlet.CellInteger:
		if c.Int >= 0 && c.Int <= 0xFFFF_FFFF {
			return v4Key(uint32(c.Int)), true
		}
	}
	return u128{}, false
}

// parseRustU32 reads digits as Rust's u32 parser does: an optional `+`.
func parseRustU32(s string) (uint32, bool) {
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 32)
	return uint32(v), err == nil
}

// cidr4 is an IPv4 network `a.b.c.d/n` as its first and last address.
func cidr4(c omlet.Cell) (uint32, uint32, bool) {
	if c.Kind != omlet.CellText {
		return 0, 0, false
	}
	ipText, bitsText, found := strings.Cut(strings.TrimSpace(c.Text), "/")
	if !found {
		return 0, 0, false
	}
	ip, ok := parseIPv4(ipText)
	bits, ok2 := parseRustU32(bitsText)
	if !ok || !ok2 || bits > 32 {
		return 0, 0, false
	}
	var mask uint32
	if bits > 0 {
		mask = ^uint32(0) << (32 - bits)
	}
	return ip & mask, ip | ^mask, true
}

// Network is a network of either family as omlet_lang::intranet reads it.
type network struct {
	addr   u128
	prefix int
}

// parseCIDR reads `a.b.c.d/n`, `v6::/n` or a bare address, trimmed.
func parseCIDR(text string) (network, bool) {
	text = strings.TrimSpace(text)
	addrText, prefixText, hasPrefix := strings.Cut(text, "/")
	addrText = strings.TrimSpace(addrText)
	addr, ok := parseAddr(addrText)
	if !ok {
		return network{}, false
	}
	_, v4 := parseIPv4(addrText)
	prefix := 128
	if v4 {
		prefix = 32
	}
	if hasPrefix {
		p := strings.TrimSpace(prefixText)
		if p == "" || len(p) > 3 {
			return network{}, false
		}
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return network{}, false
			}
		}
		n, _ := strconv.Atoi(p)
		if n > 255 {
			return network{}, false
		}
		prefix = n
	}
	if v4 {
		if prefix > 32 {
			return network{}, false
		}
		prefix += 96
	} else if prefix > 128 {
		return network{}, false
	}
	m := mask128(prefix)
	return network{u128{addr.hi & m.hi, addr.lo & m.lo}, prefix}, true
}

func (n network) last() u128 {
	m := mask128(n.prefix)
	return u128{n.addr.hi | ^m.hi, n.addr.lo | ^m.lo}
}

// cidr is a network of either family (text with a `/`) as its first and
// last address.
func cidr(c omlet.Cell) (u128, u128, bool) {
	if c.Kind != omlet.CellText || !strings.Contains(c.Text, "/") {
		return u128{}, u128{}, false
	}
	n, ok := parseCIDR(c.Text)
	if !ok {
		return u128{}, u128{}, false
	}
	return n.addr, n.last(), true
}

// lossyText is bytes as text, each invalid UTF-8 byte replaced by U+FFFD
// (what SQLite's registered helpers read a BLOB argument as).
func lossyText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		sb.WriteRune(r)
		b = b[n:]
	}
	return sb.String()
}
