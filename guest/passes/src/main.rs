//! `omlet-wasm-passes lower-copies IN OUT`: the module IN with its short
//! copies lowered (`omlet_wasm_passes::copies`), written to OUT (which may
//! be IN). Run by scripts/build-guest.sh.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pass, input, output] = args.as_slice() else {
        eprintln!("usage: omlet-wasm-passes lower-copies IN OUT");
        return ExitCode::from(2);
    };
    if pass != "lower-copies" {
        eprintln!("omlet-wasm-passes: unknown pass `{pass}` (known: lower-copies)");
        return ExitCode::from(2);
    }
    let result = std::fs::read(input)
        .map_err(|e| format!("{input}: {e}"))
        .and_then(|m| omlet_wasm_passes::copies::lower_short_copies(&m).map_err(|e| format!("{input}: {e}")))
        .and_then(|m| std::fs::write(output, m).map_err(|e| format!("{output}: {e}")));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("omlet-wasm-passes: {e}");
            ExitCode::FAILURE
        }
    }
}
