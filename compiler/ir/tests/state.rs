//! State expressions read the instance's data through paths whose indices they evaluate
//! first: short paths and long ones alike.

use amp_ir::{DataStep, FieldId, InstanceData, ResolvedStep, StateExpr};

/// Data whose int at a path spells the path: each index a digit, each field its length;
/// `len_at` is the number of steps.
struct Spelled;

impl InstanceData for Spelled {
    fn int_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        path.iter()
            .map(|step| match step {
                ResolvedStep::Field(name) => i64::try_from(name.len()).ok(),
                ResolvedStep::Index(i) => (0..10).contains(i).then_some(*i),
                ResolvedStep::Variant(v) => Some(i64::from(*v)),
            })
            .try_fold(0i64, |n, d| n.checked_mul(10)?.checked_add(d?))
    }

    fn len_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        i64::try_from(path.len()).ok()
    }
}

/// `steps` steps: fields `ab`, indices read from state field 0, then variant 1, in turn.
fn path(steps: usize) -> Vec<DataStep> {
    (0..steps)
        .map(|s| match s % 3 {
            0 => DataStep::Field("ab".into()),
            1 => DataStep::Index(Box::new(StateExpr::Field(FieldId(0)))),
            _ => DataStep::Variant(1),
        })
        .collect()
}

#[test]
fn a_data_path_reads_the_data_at_its_evaluated_indices_however_long() {
    for steps in [1, 3, 8, 9, 12] {
        let spelled: String = (0..steps).map(|s| ["2", "7", "1"][s % 3]).collect();
        let expected: i64 = spelled.parse().unwrap();
        assert_eq!(StateExpr::Data(path(steps)).eval(&[7], &Spelled), Some(expected), "{steps} steps");
        assert_eq!(StateExpr::Len(path(steps)).eval(&[7], &Spelled), Some(steps as i64), "{steps} steps");
        // An index that cannot be evaluated (no state field 0) leads nowhere.
        if steps > 1 {
            assert_eq!(StateExpr::Data(path(steps)).eval(&[], &Spelled), None, "{steps} steps");
        }
    }
}
