//! The probe binary: see [`sandbox_conformance::probe`].

fn main() {
    sandbox_conformance::probe::main(std::env::args_os().collect())
}
