//! The value of one piece of instance data.

/// A dense f32 tensor, row-major; a scalar has an empty shape and one element.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Tensor {
    pub fn scalar(x: f32) -> Tensor {
        Tensor { shape: Vec::new(), data: vec![x] }
    }

    /// A tensor of the given shape; `None` when `data` has the wrong length.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Option<Tensor> {
        (Tensor::elements_of(&shape) == Some(data.len())).then_some(Tensor { shape, data })
    }

    /// The number of elements the shape calls for (`None` if it overflows).
    pub fn elements(&self) -> Option<usize> {
        Tensor::elements_of(&self.shape)
    }

    fn elements_of(shape: &[usize]) -> Option<usize> {
        shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }
}

/// One value of instance data, nested as its type is (see `amp_ir::DataTy`).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Bool(bool),
    Tensor(Tensor),
    Seq(Vec<Value>),
    Tuple(Vec<Value>),
    /// A record's fields in the schema's order.
    Record(Vec<Value>),
    /// An enum value: the variant's index in the schema and its fields in order.
    Variant {
        tag: u32,
        fields: Vec<Value>,
    },
}
