package knowledge

import (
	"fmt"
	"strings"

	omlet "example.invalid/omlet/go"
)

func v4Net(a, b, c, d byte, n uint8) omlet.Network {
	return omlet.Network{Low: 0xffff_0000_0000 | uint64(a)<<24 | uint64(b)<<16 | uint64(c)<<8 | uint64(d), Prefix: 96 + n}
}

// BuiltinIntranetNets are the networks that are LAN when nothing else is
// configured (OML 1.25 §9.1): 10/8, 172.16/12, 192.168/16, 127/8, ::1/128
// and fc00::/7.
func BuiltinIntranetNets() []omlet.Network {
	return []omlet.Network{
		v4Net(10, 0, 0, 0, 8), v4Net(172, 16, 0, 0, 12), v4Net(192, 168, 0, 0, 16), v4Net(127, 0, 0, 0, 8),
		{Low: 1, Prefix: 128}, {High: 0xfc00 << 48, Prefix: 7},
	}
}

// IntranetNets is the `[intranet_nets]` table of a knowledge config.
type IntranetNets struct {
	// Enabled: whether Nets apply (default true).
	Enabled *bool `toml:"enabled"`
	// Enable is the reference's spelling of Enabled.
	Enable *bool `toml:"enable"`
	// Mode: "add" (default, the built-in set plus Nets) or "replace".
	Mode string `toml:"mode"`
	// Nets in CIDR notation, IPv4 or IPv6; a bare address is one host.
	Nets []string `toml:"nets"`
}

// Effective is the list that applies, refusing an entry that is no
// network (what names the file for the message).
func (n IntranetNets) Effective(what string) ([]omlet.Network, error) {
	enabled := true
	if n.Enabled != nil {
		enabled = *n.Enabled
	} else if n.Enable != nil {
		enabled = *n.Enable
	}
	if n.Mode != "" && n.Mode != "add" && n.Mode != "replace" {
		return nil, fmt.Errorf("%s: [intranet_nets] mode: `%s` is neither \"add\" nor \"replace\"", what, n.Mode)
	}
	var nets []omlet.Network
	var bad []string
	for _, text := range n.Nets {
		net, ok := parseCIDR(text)
		if !ok {
			bad = append(bad, "`"+text+"`")
			continue
		}
		nets = append(nets, omlet.Network{High: net.addr.hi, Low: net.addr.lo, Prefix: uint8(net.prefix)})
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s: [intranet_nets] nets: %s is no network: write CIDR notation, such as \"100.64.0.0/10\" or \"fd00::/8\"",
			what, strings.Join(bad, ", "))
	}
	var out []omlet.Network
	if !enabled || n.Mode != "replace" {
		out = append(out, BuiltinIntranetNets()...)
	}
	if enabled {
		for _, net := range nets {
			dup := false
			for _, o := range out {
				dup = dup || o == net
			}
			if !dup {
				out = append(out, net)
			}
		}
	}
	return out, nil
}
