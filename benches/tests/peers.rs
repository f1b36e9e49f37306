//! The peers of the benches do omlet's work, no more and no less: on the
//! records the bench cells use, VRL's programs and the hand-written
//! functions give exactly omlet's output (JSON values, keys in any order).

use std::sync::Arc;

use omlet_benches::peers::{self, Vrl, Zones};
use omlet_benches::{PURE_RULE, Sizes, id_records, nginx};

#[test]
fn vrl_and_hand_written_rust_give_omlets_output() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sizes = Sizes { rows: 0, hot: 128, ops: 64 };
    let engine = omlet::Engine::new().unwrap();
    let zones = Arc::new(Zones::example());

    let (text, knowledge, records) = rt.block_on(nginx(&sizes));
    let rule = rt.block_on(engine.load_source("nginx.oml", &text, &omlet::LoadOptions::new().knowledge(knowledge))).unwrap();
    let mut vrl = Vrl::compile(peers::VRL_NGINX, zones.clone()).unwrap();
    let mut zoned = 0;
    for (i, r) in records.iter().enumerate().take(8) {
        let want = rt.block_on(rule.evaluate(r)).unwrap().to_json_value();
        zoned += usize::from(want.get("zone").is_some());
        let by_vrl = peers::vrl_json(vrl.run(peers::to_vrl(r)).unwrap());
        assert_eq!(by_vrl, want, "VRL on nginx record {i}");
        let by_hand = peers::nginx_by_hand(r, &zones).to_json_value();
        assert_eq!(by_hand, want, "by hand on nginx record {i}");
    }
    assert!(zoned >= 2, "the records should reach the zone lookup");

    let rule = rt.block_on(engine.load_source("pure.oml", PURE_RULE, &omlet::LoadOptions::new())).unwrap();
    let mut vrl = Vrl::compile(peers::VRL_PURE, zones).unwrap();
    for (i, r) in id_records(&sizes).iter().enumerate().take(8) {
        let want = rt.block_on(rule.evaluate(r)).unwrap().to_json_value();
        assert_eq!(peers::vrl_json(vrl.run(peers::to_vrl(r)).unwrap()), want, "VRL on pure record {i}");
        assert_eq!(peers::pure_by_hand(r).to_json_value(), want, "by hand on pure record {i}");
    }
}
