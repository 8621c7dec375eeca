//! `capitoolbelt`: Capillaries' toolbelt command line on Plexus (see `planner::toolbelt`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match planner::toolbelt::main_with(&args) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}
