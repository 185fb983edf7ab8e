//! The input schema of a model: the record its entry points take, with every record and
//! enum reachable from it, converted from the checker's types to `amp_ir::Schema`.

use amp_ir::{DataTy, EnumSchema, FieldSchema, RecordSchema, Schema, VariantSchema};
use amp_sema::{EnumId, FieldDef, Program, RecordId, Ty};
use std::collections::HashMap;

/// The schema of instances of `record`, or `None` when some type in it is not data (an
/// instance, an unknown dimension): such a program has errors or a record the runtime
/// cannot load.
pub fn input_schema(program: &Program, record: RecordId) -> Option<Schema> {
    let mut b = Builder {
        program,
        schema: Schema { records: Vec::new(), enums: Vec::new(), input: 0 },
        records: HashMap::new(),
        enums: HashMap::new(),
    };
    let input = b.record(record)?;
    b.schema.input = input;
    Some(b.schema)
}

struct Builder<'p> {
    program: &'p Program,
    schema: Schema,
    records: HashMap<RecordId, u32>,
    enums: HashMap<EnumId, u32>,
}

impl Builder<'_> {
    fn record(&mut self, id: RecordId) -> Option<u32> {
        if let Some(&done) = self.records.get(&id) {
            return Some(done);
        }
        let def = self.program.records.get(id.0 as usize)?;
        let slot = self.schema.records.len() as u32;
        self.records.insert(id, slot);
        self.schema.records.push(RecordSchema { name: def.name.clone(), fields: Vec::new() });
        let fields = self.fields(&def.fields)?;
        self.schema.records[slot as usize].fields = fields;
        Some(slot)
    }

    fn enumeration(&mut self, id: EnumId) -> Option<u32> {
        if let Some(&done) = self.enums.get(&id) {
            return Some(done);
        }
        let def = self.program.enums.get(id.0 as usize)?;
        let slot = self.schema.enums.len() as u32;
        self.enums.insert(id, slot);
        self.schema.enums.push(EnumSchema { name: def.name.clone(), variants: Vec::new() });
        let mut variants = Vec::new();
        for v in &def.variants {
            variants.push(VariantSchema { name: v.name.clone(), fields: self.fields(&v.fields)? });
        }
        self.schema.enums[slot as usize].variants = variants;
        Some(slot)
    }

    fn fields(&mut self, fields: &[FieldDef]) -> Option<Vec<FieldSchema>> {
        fields.iter().map(|f| Some(FieldSchema { name: f.name.clone(), ty: self.ty(&f.ty)? })).collect()
    }

    fn ty(&mut self, ty: &Ty) -> Option<DataTy> {
        Some(match ty {
            Ty::Int => DataTy::Int,
            Ty::Bool => DataTy::Bool,
            Ty::Tensor(shape) => {
                DataTy::F32(shape.iter().map(|d| d.value.and_then(|v| u64::try_from(v).ok())).collect::<Option<_>>()?)
            }
            Ty::Seq(t) => DataTy::Seq(Box::new(self.ty(t)?)),
            Ty::Tuple(ts) => DataTy::Tuple(ts.iter().map(|t| self.ty(t)).collect::<Option<_>>()?),
            Ty::Record(r) => DataTy::Record(self.record(*r)?),
            Ty::Enum(e) => DataTy::Enum(self.enumeration(*e)?),
            Ty::Instance(_) | Ty::Error => return None,
        })
    }
}
