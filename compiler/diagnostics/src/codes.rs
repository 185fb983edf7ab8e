//! The stable diagnostic codes. A code never changes meaning once released; each one has
//! a page `docs/errors/CODE.md` (a test checks that every code has one).

use std::fmt;

macro_rules! codes {
    ($($variant:ident = $text:literal, $severity:ident, $title:literal;)*) => {
        /// A stable diagnostic code such as `E0301`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code { $($variant,)* }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The code as printed: `E0301`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text,)* }
            }

            pub fn severity(self) -> crate::Severity {
                match self { $(Code::$variant => crate::Severity::$severity,)* }
            }

            /// A one-line summary, the heading of the code's page.
            pub fn title(self) -> &'static str {
                match self { $(Code::$variant => $title,)* }
            }

            pub fn parse(text: &str) -> Option<Code> {
                match text { $($text => Some(Code::$variant),)* _ => None }
            }
        }
    };
}

codes! {
    // Lexing.
    UnexpectedCharacter = "E0001", Error, "unexpected character";
    UnterminatedComment = "E0002", Error, "unterminated block comment";
    UnterminatedString = "E0003", Error, "unterminated string literal";
    InvalidNumber = "E0004", Error, "invalid number literal";
    // Syntax.
    UnexpectedToken = "E0010", Error, "unexpected token";
    UnexpectedEof = "E0011", Error, "unexpected end of file";
    InvalidAssignTarget = "E0012", Error, "invalid assignment target";
    StringNotAValue = "E0013", Error, "string literals are not values";
    NestingTooDeep = "E0014", Error, "source nested too deeply";
    // Names.
    UnknownName = "E0100", Error, "unknown name";
    UnknownType = "E0101", Error, "unknown type";
    UnknownField = "E0102", Error, "unknown field";
    UnknownVariant = "E0103", Error, "unknown variant";
    DuplicateDefinition = "E0104", Error, "duplicate definition";
    UnknownImport = "E0105", Error, "unknown import";
    UnknownMethod = "E0106", Error, "unknown method";
    AssignToImmutable = "E0107", Error, "assignment to an immutable binding";
    UnknownOverride = "E0108", Error, "override of an unknown hyperparameter";
    NotCallable = "E0109", Error, "value is not callable";
    ImportCycle = "E0110", Error, "import cycle";
    PrivateImport = "E0111", Error, "import of a private item";
    // Types.
    TypeMismatch = "E0200", Error, "mismatched types";
    ArityMismatch = "E0201", Error, "wrong number of arguments";
    InvalidOperands = "E0202", Error, "operator not defined for these types";
    ConditionNotBool = "E0203", Error, "condition is not a bool";
    BranchMismatch = "E0204", Error, "`if` branches have different types";
    LoopCarriedTypeChange = "E0205", Error, "loop-carried variable changes type";
    CannotInferShape = "E0206", Error, "cannot infer the shape";
    PatternMismatch = "E0207", Error, "pattern does not fit the value";
    NotIndexable = "E0208", Error, "value cannot be indexed this way";
    NotConstant = "E0209", Error, "expression is not a compile-time constant";
    ConstEvalError = "E0210", Error, "constant arithmetic failed";
    InvalidTypeHere = "E0211", Error, "type not allowed here";
    // Shapes.
    ShapeMismatch = "E0300", Error, "shape mismatch";
    LinearInputShape = "E0301", Error, "input shape does not fit the parameterized op";
    BroadcastMismatch = "E0302", Error, "elementwise operands cannot be broadcast";
    ConcatOperand = "E0303", Error, "concat operand is not a vector";
    SplitNotDivisible = "E0304", Error, "split does not divide the vector evenly";
    TopKOutOfRange = "E0305", Error, "top_k asks for more elements than the vector has";
    CollectionOperand = "E0306", Error, "collection built-in applied to the wrong kind of value";
    NonPositiveDimension = "E0307", Error, "dimension is not positive";
    RankMismatch = "E0308", Error, "tensor has the wrong rank";
    LossOperands = "E0309", Error, "loss operands do not fit";
    TooLarge = "E0310", Error, "tensor or model over Amp's size limits";
    DropoutRate = "E0311", Error, "dropout rate is not a constant in [0, 1)";
    // Control flow and recursion.
    NonExhaustiveMatch = "E0400", Error, "non-exhaustive match";
    NonStructuralRecursion = "E0401", Error, "recursion is not structural";
    PayloadCondition = "E0402", Error, "payload value used as a condition";
    MatchOnNonEnum = "E0403", Error, "match on a value that is not an enum";
    MissingPatternFields = "E0404", Error, "pattern does not mention every field";
    NotIterable = "E0405", Error, "value is not a sequence";
    ClosureOutsideMap = "E0406", Error, "closure outside a collection operation";
    // Models, layers, parameters and networks.
    MissingForward = "E0500", Error, "model has no `forward`";
    MissingLoss = "E0501", Error, "model has no `loss`";
    EntryPointSignature = "E0502", Error, "entry point has the wrong signature";
    MissingApply = "E0503", Error, "layer has no `apply`";
    HyperparameterWithoutValue = "E0504", Error, "hyperparameter has no value";
    InvalidParam = "E0505", Error, "invalid parameter declaration";
    ParamOutsideModel = "E0506", Error, "parameters are read-only";
    NetworkError = "E0507", Error, "invalid network";
    MissingReturnType = "E0508", Error, "function returns a value but declares no return type";
    // Lowering.
    NotLowered = "E0600", Error, "construct not yet lowered to the dataflow graph";
    // Rollouts of networks.
    InvalidRollout = "E0700", Error, "rollout pattern is not valid";
    BadRolloutPattern = "E0701", Error, "rollout pattern does not fit the network";
    RolloutTooLarge = "E0702", Error, "rollout analysis too large";
    // Warnings.
    UnusedVariable = "W0001", Warning, "unused variable";
    UnusedParam = "W0002", Warning, "unused parameter";
    UnreachableArm = "W0003", Warning, "unreachable match arm";
    UnusedImport = "W0004", Warning, "unused import";
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
