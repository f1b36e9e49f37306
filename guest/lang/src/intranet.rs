//! Intranet networks (OML 1.25 delta §9): which addresses `intranet_ip` and
//! `access_direct` call LAN.
//!
//! Every network is held as an IPv6 prefix. An IPv4 network `a.b.c.d/n` is
//! the IPv4-mapped prefix `::ffff:a.b.c.d/(96 + n)`, and an IPv4 address is
//! looked up as its mapped form, so an address written `::ffff:10.0.0.8` is
//! judged as `10.0.0.8` (§9.1) with no special case. The host hands the
//! effective list to the guest (WIT `knowledge.intranet-nets`); without a
//! host setting it is [`BUILTIN`].

use alloc::vec::Vec;
use core::net::IpAddr;

/// One network: `addr` with all bits past `prefix` zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    pub addr: u128,
    /// Leading bits that count, 0 to 128.
    pub prefix: u8,
}

const MAPPED: u128 = 0xffff_0000_0000;

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Net {
    let n = ((a as u128) << 24) | ((b as u128) << 16) | ((c as u128) << 8) | d as u128;
    Net { addr: MAPPED | n, prefix: 96 + len }
}

/// The networks that are LAN when the host configures none (§9.1):
/// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, `127.0.0.0/8`, `::1/128`
/// and `fc00::/7`. CGNAT and link-local addresses are WAN.
pub static BUILTIN: [Net; 6] = [
    v4(10, 0, 0, 0, 8),
    v4(172, 16, 0, 0, 12),
    v4(192, 168, 0, 0, 16),
    v4(127, 0, 0, 0, 8),
    Net { addr: 1, prefix: 128 },
    Net { addr: 0xfc00 << 112, prefix: 7 },
];

impl Net {
    /// The network of `addr` (any bits past `prefix` are cleared); `None`
    /// when the prefix is longer than the family allows.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Net> {
        let (addr, prefix) = match addr {
            IpAddr::V4(a) if prefix <= 32 => (MAPPED | u128::from(u32::from(a)), prefix + 96),
            IpAddr::V6(a) if prefix <= 128 => (u128::from(a), prefix),
            _ => return None,
        };
        Some(Net { addr: addr & mask(prefix), prefix })
    }

    /// The network of the 128-bit `addr` (IPv4 mapped), bits past `prefix`
    /// cleared; a prefix past 128 counts as 128.
    pub fn from_bits(addr: u128, prefix: u8) -> Net {
        let prefix = prefix.min(128);
        Net { addr: addr & mask(prefix), prefix }
    }

    /// The network's last address (its first is `addr`).
    pub fn last(&self) -> u128 {
        self.addr | !mask(self.prefix)
    }

    pub fn contains(&self, addr: u128) -> bool {
        addr & mask(self.prefix) == self.addr
    }
}

fn mask(prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p => u128::MAX << (128 - u32::from(p.min(128))),
    }
}

/// The address as the networks hold it (IPv4 mapped into IPv6).
pub fn key(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => MAPPED | u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Whether `addr` lies in one of `nets`.
pub fn is_lan(nets: &[Net], addr: IpAddr) -> bool {
    let k = key(addr);
    nets.iter().any(|n| n.contains(k))
}

/// Reads `a.b.c.d/n`, `v6::/n` or a bare address (a single host), trimmed;
/// `None` for anything else.
pub fn parse_cidr(text: &str) -> Option<Net> {
    let text = text.trim();
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a.trim(), Some(p.trim())),
        None => (text, None),
    };
    let addr: IpAddr = addr.parse().ok()?;
    let prefix = match prefix {
        Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|c| c.is_ascii_digit()) => p.parse::<u8>().ok()?,
        Some(_) => return None,
        None if addr.is_ipv4() => 32,
        None => 128,
    };
    Net::new(addr, prefix)
}

/// How the host's networks combine with [`BUILTIN`] (`[intranet_nets]`'s
/// `mode`, §16.3: `add` or `replace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The built-in set plus the host's.
    #[default]
    Add,
    /// The host's only.
    Replace,
}

/// The list that applies: the built-in set when `enabled` is false, else
/// `nets` added to it or replacing it.
pub fn effective(enabled: bool, mode: Mode, nets: &[Net]) -> Vec<Net> {
    let mut out = Vec::new();
    if !enabled || mode == Mode::Add {
        out.extend_from_slice(&BUILTIN);
    }
    if enabled {
        for n in nets {
            if !out.contains(n) {
                out.push(*n);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_builtin_set_is_the_private_ranges() {
        for lan in ["10.1.2.3", "172.31.255.255", "192.168.3.7", "127.0.0.1", "::1", "fd00::1", "fc00::", "::ffff:10.0.0.8"] {
            assert!(is_lan(&BUILTIN, ip(lan)), "{lan}");
        }
        for wan in ["172.32.0.1", "100.64.1.1", "169.254.0.1", "fe80::1", "2001:db8::5", "8.8.8.8", "::ffff:8.8.8.8", "::2"] {
            assert!(!is_lan(&BUILTIN, ip(wan)), "{wan}");
        }
    }

    #[test]
    fn networks_parse_with_or_without_a_prefix() {
        assert_eq!(parse_cidr(" 100.64.0.0/10 "), Some(v4(100, 64, 0, 0, 10)));
        assert_eq!(parse_cidr("10.9.9.9/8"), Some(v4(10, 0, 0, 0, 8)), "host bits are cleared");
        assert_eq!(parse_cidr("1.2.3.4"), Some(v4(1, 2, 3, 4, 32)));
        assert_eq!(parse_cidr("2001:db8:100::/48").map(|n| n.prefix), Some(48));
        assert_eq!(parse_cidr("::/0"), Some(Net { addr: 0, prefix: 0 }));
        for bad in ["", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/+8", "x/8", "10.0.0/8", "10.0.0.0/1000"] {
            assert_eq!(parse_cidr(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn add_and_replace_follow_the_spec_examples() {
        let cgnat = [parse_cidr("100.64.0.0/10").unwrap()];
        let added = effective(true, Mode::Add, &cgnat);
        assert!(is_lan(&added, ip("100.64.1.1")) && is_lan(&added, ip("10.0.0.1")));
        let replaced = effective(true, Mode::Replace, &cgnat);
        assert!(is_lan(&replaced, ip("100.64.1.1")) && !is_lan(&replaced, ip("10.0.0.1")));
        assert_eq!(effective(false, Mode::Replace, &cgnat), BUILTIN.to_vec(), "disabled: the built-in set only");
    }
}
