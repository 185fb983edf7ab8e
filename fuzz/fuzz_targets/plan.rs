//! The planner on arbitrary graphs and profiles (both untrusted: `amprun` plans any graph
//! it loads and verifies, refined by any `--plan-profile` file). The input is a graph in
//! the IR text form, optionally followed by a line `#profile` and a profile's JSON.
//! Whatever loads and verifies (as `amprun` and `ampc` require before they plan) must be
//! planned for 1, 2, 3 and 16 workers, or refused with an error, never a panic;
//! a plan must place every node once on a worker in range (checked by `Plan::placement`)
//! and read back from its JSON, and `evaluate` must accept the placement it chose and
//! predict it no slower than everything on one worker.
//! Run: `cargo +nightly fuzz run plan corpus/plan seeds_plan -- -max_total_time=300`.
#![no_main]

use amp_plan::{estimate, evaluate, plan, Assumptions, Plan, Profile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (graph_text, profile_text) = text.split_once("\n#profile\n").unwrap_or((&text, ""));
    let Ok(graph) = amp_ir::text::parse(graph_text) else { return };
    let Ok(graph) = amp_ir::verify::verify(graph) else { return };
    let profile = Profile::from_json(profile_text).ok();
    for plain_sgd in [false, true] {
        let assumptions = Assumptions { update_every: 8.0, plain_sgd, ..Assumptions::default() };
        let Ok(costs) = estimate(&graph, &assumptions, profile.as_ref()) else { continue };
        for workers in [1, 2, 3, 16] {
            let Ok(chosen) = plan(&graph, &costs, workers) else { continue };
            let placement = chosen.placement(&graph).expect("a plan places its own graph");
            let back = Plan::from_json(&chosen.to_json()).expect("a plan reads back from its JSON");
            assert_eq!(back.placement(&graph).as_ref(), Ok(&placement), "the JSON plan places differently");
            let evaluated = evaluate(&graph, &costs, workers, &placement).expect("the chosen placement evaluates");
            // The search starts from everything on one worker and only takes moves that
            // improve: what it chose is predicted no slower (the latency bound included).
            let one = evaluate(&graph, &costs, workers, &vec![0; placement.len()]).expect("one worker evaluates");
            let bottleneck = |p: &Plan| p.cost_model.as_ref().map_or(0.0, |c| c.bottleneck_us_per_instance);
            let (chosen_us, one_us) = (bottleneck(&evaluated), bottleneck(&one));
            assert!(chosen_us <= one_us * (1.0 + 1e-9) + 1e-9, "{chosen_us} us per instance against {one_us} on one worker");
        }
    }
});
