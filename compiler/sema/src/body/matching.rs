//! `match`: variant patterns, exhaustiveness, and the structurally smaller bindings
//! that recursion may pass on.

use crate::collect::suggest;
use crate::typed::*;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self};

use super::{branch_value_span, collect_binds, mk, FnChecker};

impl FnChecker<'_, '_> {
    pub(super) fn check_match(
        &mut self,
        scrutinee: &ast::Expr,
        arms: &[ast::MatchArm],
        span: Span,
        expected: Option<&Ty>,
    ) -> Expr {
        let scrut = self.check_expr(scrutinee, None);
        let rooted = self.is_rooted(&scrut);
        let enum_id = match &scrut.ty {
            Ty::Enum(id) => Some(*id),
            Ty::Error => None,
            other => {
                let shown = self.ck.ty_str(other);
                self.ck.error(
                    Diagnostic::new(
                        Code::MatchOnNonEnum,
                        scrut.span,
                        format!("`match` needs an enum, found `{shown}`"),
                    )
                    .with_primary(format!("this is `{shown}`"))
                    .with_help("use `if` for ints and bools"),
                );
                None
            }
        };
        let variants: Vec<VariantDef> =
            enum_id.map(|id| self.ck.program.enums[id.0 as usize].variants.clone()).unwrap_or_default();
        let enum_name = enum_id.map(|id| self.ck.program.enums[id.0 as usize].name.clone()).unwrap_or_default();
        let mut covered = vec![false; variants.len()];
        let mut all_covered = false;
        let mut out_arms = Vec::new();
        let mut result_ty: Option<(Ty, Span)> = None;
        for arm in arms {
            if all_covered && enum_id.is_some() {
                self.ck.error(
                    Diagnostic::new(Code::UnreachableArm, arm.pattern.span, "unreachable match arm")
                        .with_primary("earlier arms already match every value"),
                );
            }
            self.push_scope(arm.span);
            let (variant, bindings) = match enum_id {
                Some(_) => self.check_arm_pattern(
                    &scrut.ty.clone(),
                    &arm.pattern,
                    &variants,
                    &enum_name,
                    rooted,
                    &mut covered,
                    &mut all_covered,
                ),
                None => {
                    self.bind_error_pattern(&arm.pattern);
                    (None, Vec::new())
                }
            };
            let body = self.check_expr(&arm.body, expected.or(result_ty.as_ref().map(|r| &r.0)));
            self.pop_scope();
            match &result_ty {
                None => result_ty = Some((body.ty.clone(), branch_value_span(&body))),
                Some((t, first_span)) if !body.ty.fits(t) => {
                    let (a, b) = (self.ck.ty_str(t), self.ck.ty_str(&body.ty));
                    self.ck.error(
                        Diagnostic::new(
                            Code::BranchMismatch,
                            branch_value_span(&body),
                            format!("match arms have different types: `{a}` vs `{b}`"),
                        )
                        .with_primary(format!("this arm is `{b}`"))
                        .with_label(*first_span, format!("the first arm is `{a}`")),
                    );
                }
                Some((t, s)) if t.is_error() => result_ty = Some((body.ty.clone(), *s)),
                Some(_) => {}
            }
            out_arms.push(MatchArm { variant, bindings, body, span: arm.span });
        }
        // An arm naming an unknown variant was probably meant for a missing one (already
        // reported), so coverage is not judged.
        let unknown_variant = arms.iter().any(|a| {
            matches!(&a.pattern.kind, ast::PatternKind::Variant { name, .. }
                if !variants.iter().any(|v| v.name == name.name))
        });
        if enum_id.is_some() && !all_covered && !unknown_variant {
            let missing: Vec<&VariantDef> =
                variants.iter().zip(&covered).filter(|(_, c)| !**c).map(|(v, _)| v).collect();
            if !missing.is_empty() {
                let names: Vec<String> = missing.iter().map(|v| format!("`{}`", v.name)).collect();
                let mut d = Diagnostic::new(
                    Code::NonExhaustiveMatch,
                    scrut.span,
                    format!("non-exhaustive match: {} not covered", names.join(", ")),
                )
                .with_primary("some variants are not matched")
                .with_help("add an arm for each missing variant, or a `_ => ...` arm");
                let value_ty = expected.cloned().or_else(|| result_ty.as_ref().map(|r| r.0.clone()));
                if let Some((at, text)) = self.missing_arms(arms, span, &missing, value_ty.as_ref()) {
                    d = d.with_insertion(at, text);
                }
                self.ck.error(d);
            }
        }
        let ty = result_ty.map_or(Ty::unit(), |r| r.0);
        mk(ExprKind::Match(Box::new(scrut), out_arms), ty, span)
    }

    /// The quick fix of a non-exhaustive match: an arm for each `missing` variant after the
    /// last one, `Variant { .. } => zeros(),`, whose value is a placeholder of the arms'
    /// type (`zeros()`, `0`, `false`, or a tuple of those); none for other types.
    fn missing_arms(
        &self,
        arms: &[ast::MatchArm],
        span: Span,
        missing: &[&VariantDef],
        ty: Option<&Ty>,
    ) -> Option<(Span, String)> {
        let value = placeholder(ty?)?;
        let text = &self.ck.map.get(span.file)?.text;
        let indent = |at: usize| -> Option<String> {
            let start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
            Some(text.get(start..)?.chars().take_while(|c| *c == ' ' || *c == '\t').collect())
        };
        let arm = |v: &VariantDef| match v.fields.is_empty() {
            true => format!("{} => {value},", v.name),
            false => format!("{} {{ .. }} => {value},", v.name),
        };
        let (at, comma, indent, close) = match (arms.first(), arms.last()) {
            (Some(first), Some(last)) => {
                // A last arm written without its comma needs one, unless its body is a block.
                let block = matches!(
                    last.body.kind,
                    ast::ExprKind::Block(_) | ast::ExprKind::If(..) | ast::ExprKind::Match(..)
                );
                let ended = text.get(..last.span.end as usize)?.trim_end().ends_with(',');
                let comma = if block || ended { "" } else { "," };
                (last.span.end, comma, indent(first.span.start as usize)?, String::new())
            }
            // `match t { }`: the arms go inside the braces, one level in.
            _ => {
                let outer = indent(span.start as usize)?;
                (span.end.checked_sub(1)?, "", format!("{outer}    "), format!("\n{outer}"))
            }
        };
        let arms: String = missing.iter().map(|v| format!("\n{indent}{}", arm(v))).collect();
        Some((Span { file: span.file, start: at, end: at }, format!("{comma}{arms}{close}")))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_arm_pattern(
        &mut self,
        scrut_ty: &Ty,
        pat: &ast::Pattern,
        variants: &[VariantDef],
        enum_name: &str,
        rooted: bool,
        covered: &mut [bool],
        all_covered: &mut bool,
    ) -> (Option<u32>, Vec<(u32, Pattern)>) {
        let (name, fields, rest) = match &pat.kind {
            ast::PatternKind::Wildcard => {
                *all_covered = true;
                return (None, Vec::new());
            }
            ast::PatternKind::Bind(name) if !variants.iter().any(|v| v.name == name.name) => {
                *all_covered = true;
                let _ = self.declare_local(name, scrut_ty.clone(), false);
                return (None, Vec::new());
            }
            ast::PatternKind::Bind(name) => (name, &[][..], true),
            ast::PatternKind::Variant { name, fields, rest } => (name, &fields[..], *rest),
            _ => {
                self.ck.error(
                    Diagnostic::new(Code::PatternMismatch, pat.span, format!("expected a variant of `{enum_name}`"))
                        .with_primary("not a variant pattern"),
                );
                return (None, Vec::new());
            }
        };
        let Some(vi) = variants.iter().position(|v| v.name == name.name) else {
            let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
            let mut d = Diagnostic::new(
                Code::UnknownVariant,
                name.span,
                format!("enum `{enum_name}` has no variant `{}`", name.name),
            )
            .with_primary("unknown variant")
            .with_note(format!("its variants are: {}", names.join(", ")));
            if let Some(s) = suggest(&name.name, names.iter().copied()) {
                d = d.with_suggestion(s);
            }
            self.ck.error(d);
            // Its bindings exist, with unknown types, so the arm's body is still checked
            // without reporting them as unknown names.
            self.bind_error_pattern(pat);
            return (None, Vec::new());
        };
        let variant = &variants[vi];
        // After a catch-all, the caller already reported this arm as unreachable.
        if covered[vi] && !*all_covered {
            self.ck.error(
                Diagnostic::new(Code::UnreachableArm, pat.span, format!("variant `{}` is already matched", name.name))
                    .with_primary("unreachable arm"),
            );
        }
        covered[vi] = true;
        if covered.iter().all(|c| *c) {
            *all_covered = true;
        }
        self.ck.reference(name.span, variant.span, format!("{enum_name}::{}", variant.name));
        let mut bindings = Vec::new();
        let mut mentioned = vec![false; variant.fields.len()];
        let mut unknown_field = false;
        for fp in fields {
            let Some(fi) = variant.fields.iter().position(|f| f.name == fp.field.name) else {
                let names: Vec<&str> = variant.fields.iter().map(|f| f.name.as_str()).collect();
                let mut d = Diagnostic::new(
                    Code::UnknownField,
                    fp.field.span,
                    format!("variant `{}` has no field `{}`", variant.name, fp.field.name),
                )
                .with_primary("unknown field")
                .with_label(variant.span, "variant defined here");
                if let Some(s) = suggest(&fp.field.name, names.iter().copied()) {
                    d = d.with_suggestion(s);
                }
                self.ck.error(d);
                // Bind it anyway (type unknown) so its uses are not unknown names too.
                match &fp.pattern {
                    None => {
                        self.declare_local(&fp.field, Ty::Error, false);
                    }
                    Some(p) => {
                        self.bind_pattern(p, &Ty::Error, false);
                    }
                }
                unknown_field = true;
                continue;
            };
            mentioned[fi] = true;
            let field = &variant.fields[fi];
            let pattern = match &fp.pattern {
                None => Pattern::Bind(self.declare_local(&fp.field, field.ty.clone(), false)),
                Some(p) => self.bind_pattern(p, &field.ty, false),
            };
            if rooted {
                collect_binds(&pattern, &mut self.smaller);
            }
            bindings.push((fi as u32, pattern));
        }
        // With a misspelt field, the missing one is most likely that field: one error.
        if !rest && !unknown_field && mentioned.iter().any(|m| !m) {
            let missing: Vec<String> = variant
                .fields
                .iter()
                .zip(&mentioned)
                .filter(|(_, m)| !**m)
                .map(|(f, _)| format!("`{}`", f.name))
                .collect();
            self.ck.error(
                Diagnostic::new(
                    Code::MissingPatternFields,
                    pat.span,
                    format!("pattern does not mention {}", missing.join(", ")),
                )
                .with_primary("fields missing")
                .with_help("list them, or end the pattern with `..` to ignore the rest"),
            );
        }
        (Some(vi as u32), bindings)
    }

    /// Whether `e` is a parameter or a part of one (for structural recursion).
    pub(super) fn is_rooted(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Local(id) => self.roots.contains(id) || self.smaller.contains(id),
            ExprKind::Field(inner, _) | ExprKind::TupleField(inner, _) => self.is_rooted(inner),
            _ => false,
        }
    }

    /// Whether `e` is strictly smaller than a parameter.
    pub(super) fn is_smaller(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Local(id) => self.smaller.contains(id),
            ExprKind::Field(inner, _) | ExprKind::TupleField(inner, _) => self.is_rooted(inner),
            _ => false,
        }
    }

    /// Binds the names of a match arm whose scrutinee is not an enum, as unknown.
    pub(super) fn bind_error_pattern(&mut self, pat: &ast::Pattern) {
        match &pat.kind {
            ast::PatternKind::Variant { fields, .. } => {
                for f in fields {
                    match &f.pattern {
                        None => {
                            self.declare_local(&f.field, Ty::Error, false);
                        }
                        Some(p) => {
                            self.bind_pattern(p, &Ty::Error, false);
                        }
                    }
                }
            }
            _ => {
                self.bind_pattern(pat, &Ty::Error, false);
            }
        }
    }
}

/// A value of type `ty` to fill a new arm with, if it has a simple one.
fn placeholder(ty: &Ty) -> Option<String> {
    match ty {
        Ty::Tensor(_) => Some("zeros()".to_string()),
        Ty::Int => Some("0".to_string()),
        Ty::Bool => Some("false".to_string()),
        Ty::Tuple(parts) if !parts.is_empty() => {
            let parts: Option<Vec<String>> = parts.iter().map(placeholder).collect();
            Some(format!("({})", parts?.join(", ")))
        }
        _ => None,
    }
}
