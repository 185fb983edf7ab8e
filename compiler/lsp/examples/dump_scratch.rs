fn main() {
    let path = std::env::args().nth(1).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let t = std::time::Instant::now();
    let (map, checked) = amp_sema::check_source(&path, &text, &Default::default());
    eprintln!("took {:?}", t.elapsed());
    for (id, f) in map.files() { println!("file {:?} {}", id, f.name); }
    for d in &checked.diagnostics { println!("{:?}", d); }
    for r in &checked.program.references { println!("REF use={:?} {:?} def={:?} {:?} hover={}", r.use_span, map.get(r.use_span.file).unwrap().slice(r.use_span), r.def_span, map.get(r.def_span.file).unwrap().slice(r.def_span), r.hover); }
    for (s, t) in &checked.program.expr_types { println!("EXPR {:?} {:?} : {}", s, map.get(s.file).unwrap().slice(*s), t); }
    for s in &checked.program.symbols { println!("SYM {:?}", s); }
}
