//! The SQL helper functions (spec §8.11.4) that the guest folds into a
//! lookup's parameters: `ip4_int`, `cidr4_contains`, `ip_key` and the rest.

use super::*;

/// An IPv4 address as the `ip4_*` and `cidr4_*` helpers read it: dotted
/// text (trimmed) or an integer in range. The host's in-memory index of
/// networks reads parameters with it, to answer as the helper would.
pub fn cell_ipv4(c: &Cell) -> Option<u32> {
    match c {
        Cell::Text(s) => parse_ipv4(s.trim()).map(u32::from),
        Cell::Integer(i) => u32::try_from(*i).ok(),
        _ => None,
    }
}

pub(super) fn cidr4(c: &Cell) -> Option<(u32, u32)> {
    let Cell::Text(s) = c else { return None };
    let (ip, bits) = s.trim().split_once('/')?;
    let ip = u32::from(parse_ipv4(ip)?);
    let bits: u32 = bits.parse().ok().filter(|b| *b <= 32)?;
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    Some((ip & mask, ip | !mask))
}

/// An address of either family as the 128-bit number of its IPv6 form
/// (IPv4 mapped), from text or an IPv4 integer.
pub(super) fn cell_ip(c: &Cell) -> Option<u128> {
    match c {
        Cell::Text(s) => crate::value::parse_ip(s).map(crate::intranet::key),
        Cell::Integer(i) => u32::try_from(*i).ok().map(|n| crate::intranet::key(IpAddr::V4(n.into()))),
        _ => None,
    }
}

/// A network of either family, as its first and last address.
pub(super) fn cidr(c: &Cell) -> Option<(u128, u128)> {
    let Cell::Text(s) = c else { return None };
    if !s.contains('/') {
        return None;
    }
    let net = crate::intranet::parse_cidr(s)?;
    Some((net.addr, net.last()))
}

pub(super) fn key_text(n: u128) -> Cell {
    Cell::Text(alloc::format!("{n:032x}"))
}

/// A SQL helper over parameter values, computed in the guest (§8.11.4).
pub fn helper(h: Helper, args: &[Cell]) -> Cell {
    let arg = |i: usize| args.get(i).unwrap_or(&Cell::Null);
    match h {
        Helper::Ip4Int => Cell::Integer(cell_ipv4(arg(0)).map(i64::from).unwrap_or(0)),
        Helper::Ip4Between => match (cell_ipv4(arg(0)), cell_ipv4(arg(1)), cell_ipv4(arg(2))) {
            (Some(ip), Some(lo), Some(hi)) => Cell::Integer((lo <= ip && ip <= hi) as i64),
            _ => Cell::Integer(0),
        },
        Helper::Cidr4Min => cidr4(arg(0)).map(|(lo, _)| Cell::Integer(lo as i64)).unwrap_or(Cell::Null),
        Helper::Cidr4Max => cidr4(arg(0)).map(|(_, hi)| Cell::Integer(hi as i64)).unwrap_or(Cell::Null),
        Helper::Cidr4Contains => match (cell_ipv4(arg(0)), cidr4(arg(1))) {
            (Some(ip), Some((lo, hi))) => Cell::Integer((lo <= ip && ip <= hi) as i64),
            _ => Cell::Integer(0),
        },
        Helper::Ip4Text => match arg(0) {
            Cell::Integer(i) => match u32::try_from(*i) {
                Ok(n) => Cell::Text(Ipv4Addr::from(n).to_string()),
                Err(_) => Cell::Null,
            },
            _ => Cell::Null,
        },
        Helper::TrimQuotes => match arg(0) {
            Cell::Text(s) => {
                let b = s.as_bytes();
                if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
                    Cell::Text(s[1..s.len() - 1].to_string())
                } else {
                    Cell::Text(s.clone())
                }
            }
            other => other.clone(),
        },
        Helper::IpKey => cell_ip(arg(0)).map_or(Cell::Null, key_text),
        Helper::CidrMinKey => cidr(arg(0)).map_or(Cell::Null, |(lo, _)| key_text(lo)),
        Helper::CidrMaxKey => cidr(arg(0)).map_or(Cell::Null, |(_, hi)| key_text(hi)),
        Helper::CidrContains => match (cell_ip(arg(0)), cidr(arg(1))) {
            (Some(ip), Some((lo, hi))) => Cell::Integer((lo <= ip && ip <= hi) as i64),
            _ => Cell::Integer(0),
        },
    }
}
