//! `[intranet_nets]`: the networks that the OML functions `intranet_ip` and
//! `access_direct` call LAN (OML 1.25 delta §9 and §16.3).
//!
//! The section has the same shape in omlet's knowledge config and in a Warp
//! Parse knowdb. The host turns it into one list of networks when the
//! knowledge opens; the guest asks for the list through the WIT import
//! `knowledge.intranet-nets` (the list itself is `omlet_lang::intranet`'s).

use omlet_lang::intranet::{self, Mode, Net};
use serde::Deserialize;

/// The `[intranet_nets]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntranetNets {
    /// Whether `nets` apply (default true; `enable` is accepted too, as the
    /// reference spells it). When false, only the built-in set applies.
    #[serde(default = "yes", alias = "enable")]
    pub enabled: bool,
    /// `add` (default): the built-in private ranges plus `nets`; `replace`:
    /// `nets` only.
    #[serde(default)]
    pub mode: Mode,
    /// Networks in CIDR notation, IPv4 or IPv6 (`100.64.0.0/10`,
    /// `2001:db8:100::/48`); a bare address is a single host.
    #[serde(default)]
    pub nets: Vec<String>,
}

fn yes() -> bool {
    true
}

impl IntranetNets {
    /// The networks that apply, and the entries of `nets` that are no network.
    pub fn effective(&self) -> (Vec<Net>, Vec<String>) {
        let mut bad = Vec::new();
        let mut nets = Vec::new();
        for n in &self.nets {
            match intranet::parse_cidr(n) {
                Some(net) => nets.push(net),
                None => bad.push(n.clone()),
            }
        }
        (intranet::effective(self.enabled, self.mode, &nets), bad)
    }

    /// [`effective`](Self::effective), refusing an entry that is no network
    /// (`what` names the file for the message).
    pub fn strict(&self, what: &str) -> crate::Result<Vec<Net>> {
        match self.effective() {
            (nets, bad) if bad.is_empty() => Ok(nets),
            (_, bad) => Err(crate::Error::Knowledge(format!(
                "{what}: [intranet_nets] nets: {} is no network: write CIDR notation, such as \"100.64.0.0/10\" or \"fd00::/8\"",
                bad.iter().map(|b| format!("`{b}`")).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_reads_as_the_reference_writes_it() {
        let n: IntranetNets = toml::from_str("enable = true\nmode = \"replace\"\nnets = [\"100.64.0.0/10\", \"x\"]").unwrap();
        let (nets, bad) = n.effective();
        assert_eq!(nets.len(), 1);
        assert_eq!(bad, ["x"]);
        assert!(n.strict("k.toml").unwrap_err().to_string().contains("`x` is no network"));
        let d: IntranetNets = toml::from_str("").unwrap();
        assert_eq!(d.effective().0, intranet::BUILTIN.to_vec());
        assert!(toml::from_str::<IntranetNets>("mode = \"merge\"").is_err());
        assert!(toml::from_str::<IntranetNets>("netz = []").is_err());
    }
}
