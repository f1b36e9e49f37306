//! Rule sets: several models in one program, routed by rule path (§3.1).

use omlet_lang::{Route, RouteError, Source, compile};

fn model(name: &str, rule: &str, enable: bool) -> String {
    format!("name : {name}\nrule : {rule}\nenable : {enable}\n---\nm = chars({name}) ;\n")
}

#[test]
fn records_go_to_the_enabled_model_whose_pattern_matches() {
    let (a, b, c, d) = (
        model("nginx", "/nginx/*", true),
        model("fw", "/firewall/deny /firewall/allow", true),
        model("old_fw", "/firewall/*", false),
        model("manual", "", true),
    );
    let files = [
        Source { file: "a.oml", text: &a },
        Source { file: "b.oml", text: &b },
        Source { file: "c.oml", text: &c },
        Source { file: "d.oml", text: &d },
    ];
    let p = compile(&files, (0, 0)).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(p.route(Route::Path("/nginx/access_log")), Ok(0));
    assert_eq!(p.route(Route::Path("/firewall/allow")), Ok(1));
    // The disabled model claims nothing, even where nothing else does.
    assert_eq!(p.route(Route::Path("/firewall/log")), Err(RouteError::Unclaimed("/firewall/log".into())));
    // By name, every model can be chosen, disabled ones too.
    assert_eq!(p.route(Route::Model("old_fw")), Ok(2));
    assert_eq!(p.route(Route::Model("manual")), Ok(3));
    assert_eq!(p.route(Route::Model("nope")), Err(RouteError::UnknownModel("nope".into())));
    assert_eq!(p.route(Route::Only), Err(RouteError::Ambiguous(4)));
    assert_eq!(RouteError::Unclaimed("/x".into()).to_string(), "no enabled model claims rule path `/x`");
}

#[test]
fn two_models_claiming_one_path_is_an_error_naming_both_files() {
    let (a, b) = (model("all_nginx", "/nginx/*", true), model("access", "/other /nginx/access_log", true));
    let err = compile(&[Source { file: "a.oml", text: &a }, Source { file: "b.oml", text: &b }], (0, 0)).unwrap_err();
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].file, "b.oml");
    let d = &err[0].diagnostics[0];
    assert_eq!(
        d.message,
        "rule path `/nginx/access_log` is claimed both by this model and by model `all_nginx` in a.oml (pattern `/nginx/*`)"
    );
    // The caret is on the overlapping pattern of b.oml: line 2, after `rule : /other `.
    assert_eq!((d.line, d.column), (2, 15));
    // Disabling either model settles it.
    let b_off = model("access", "/nginx/access_log", false);
    assert!(compile(&[Source { file: "a.oml", text: &a }, Source { file: "b.oml", text: &b_off }], (0, 0)).is_ok());
}

#[test]
fn model_names_are_unique_in_a_set() {
    let (a, b) = (model("dup", "/a", true), model("dup", "/b", true));
    let err = compile(&[Source { file: "a.oml", text: &a }, Source { file: "b.oml", text: &b }], (0, 0)).unwrap_err();
    assert_eq!(err[0].file, "b.oml");
    assert_eq!(err[0].diagnostics[0].message, "model `dup` is also defined in a.oml");
    assert_eq!((err[0].diagnostics[0].line, err[0].diagnostics[0].column), (1, 8));
}

#[test]
fn a_single_model_is_the_only_route_even_when_disabled() {
    let a = model("solo", "/x", false);
    let p = compile(&[Source { file: "a.oml", text: &a }], (0, 0)).unwrap();
    assert_eq!(p.route(Route::Only), Ok(0));
    assert_eq!(p.route(Route::Path("/x")), Err(RouteError::Unclaimed("/x".into())));
}
