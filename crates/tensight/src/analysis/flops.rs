//! FLOPs and minimum bytes moved per op, modelled from the op's name and the inputs the
//! profiler recorded.
//!
//! Inputs: one [`CpuOp`] with its raw `Input Dims`, `Input type` and `Concrete Inputs`
//! (recorded with `record_shapes=True`). Outputs: an [`OpCost`] for the ops that have a
//! formula (GEMMs, convolutions, scaled-dot-product attention, forward and backward), and
//! [`min_bytes_elementwise`] for the others. Kineto JSON carries no FLOPs in torch 2.11,
//! so these numbers are a model, not a measurement.
//!
//! Conventions are those of PyTorch's own counter, `torch/utils/flop_counter.py`
//! (`FlopCounterMode`): a multiply-add is 2 FLOPs; bias adds, scaling, softmax and
//! activations are not counted; attention counts the full L×S score matrix even when
//! causal; backward ops count each gradient they compute. Minimum bytes are a lower bound
//! on memory traffic: every tensor input read once and every output written once, no
//! re-reads, no workspace.
//!
//! What this module does not do: choose which op of a call tree to count. Composite ops
//! and the ops they call both have formulas (`aten::linear` → `aten::addmm`,
//! `aten::conv2d` → `aten::convolution` → `aten::_convolution` → `aten::cudnn_convolution`,
//! `aten::scaled_dot_product_attention` → `aten::_scaled_dot_product_flash_attention`), so
//! a caller summing FLOPs must count one op per tree: the outermost op with a cost.
//! Argument positions follow each op's schema in PyTorch's `native_functions.yaml`.

use crate::model::CpuOp;
use serde::Serialize;
use serde_json::Value;

/// Element type of a tensor, parsed from Kineto's `Input type` strings (the C++ type
/// names of `caffe2::TypeMeta`: `float`, `c10::BFloat16`, `long int`, ...).
///
/// TF32 is not a storage type (a TF32 matmul reads and writes `float` tensors), so it
/// never appears here: whether an FP32 GEMM ran on TF32 tensor cores is a property of the
/// kernel, not of the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// 64-bit float (`double`).
    F64,
    /// 32-bit float (`float`).
    F32,
    /// 16-bit IEEE half (`c10::Half`).
    F16,
    /// bfloat16 (`c10::BFloat16`).
    BF16,
    /// Any 8-bit float (`c10::Float8_e4m3fn`, `c10::Float8_e5m2`, the `fnuz` variants,
    /// `c10::Float8_e8m0fnu`).
    F8,
    /// 4-bit float packed two per byte (`c10::Float4_e2m1fn_x2`); one element is the pair.
    F4,
    /// 64-bit integer, signed or unsigned (`long int`, `unsigned long`).
    I64,
    /// 32-bit integer, signed or unsigned (`int`, `unsigned int`, `c10::qint32`).
    I32,
    /// 16-bit integer, signed or unsigned (`short int`, `unsigned short`).
    I16,
    /// Signed 8-bit integer (`signed char`, `c10::qint8`).
    I8,
    /// Unsigned 8-bit integer (`unsigned char`, `c10::quint8`).
    U8,
    /// Boolean (`bool`).
    Bool,
    /// Complex of two 32-bit floats (`c10::complex<float>`).
    C64,
    /// Complex of two 64-bit floats (`c10::complex<double>`).
    C128,
    /// A tensor of a type not listed above, or of unrecorded type.
    Other,
}

impl Dtype {
    /// Parse one `Input type` entry. `None` for entries that are not tensors: `""` (None
    /// or an unrecorded argument), `Scalar`, `ScalarList`, `TensorList`, `GenericList`.
    /// Unknown non-empty names are taken as tensors of type [`Dtype::Other`].
    pub fn from_kineto(s: &str) -> Option<Dtype> {
        let s = s.trim();
        let d = match s {
            "" | "Scalar" | "ScalarList" | "TensorList" | "GenericList" | "None" | "String"
            | "Device" | "Layout" | "MemoryFormat" | "ScalarType" => return None,
            "double" => Dtype::F64,
            "float" => Dtype::F32,
            "c10::Half" | "Half" => Dtype::F16,
            "c10::BFloat16" | "BFloat16" => Dtype::BF16,
            "long int" | "long" | "long long" | "long long int" | "int64_t" | "__int64"
            | "unsigned long" | "unsigned long int" | "unsigned long long" | "uint64_t" => {
                Dtype::I64
            }
            "int" | "int32_t" | "unsigned int" | "uint32_t" | "c10::qint32" => Dtype::I32,
            "short int" | "short" | "int16_t" | "unsigned short" | "unsigned short int"
            | "uint16_t" => Dtype::I16,
            "signed char" | "int8_t" | "c10::qint8" => Dtype::I8,
            "unsigned char" | "uint8_t" | "c10::quint8" | "c10::quint4x2" | "c10::quint2x4" => {
                Dtype::U8
            }
            "bool" => Dtype::Bool,
            "c10::complex<float>" => Dtype::C64,
            "c10::complex<double>" => Dtype::C128,
            _ if s.starts_with("c10::Float8_") => Dtype::F8,
            _ if s.starts_with("c10::Float4_") => Dtype::F4,
            _ => Dtype::Other,
        };
        Some(d)
    }

    /// Bytes per element. [`Dtype::Other`] is assumed to be 4 bytes; [`Dtype::F4`] counts
    /// the stored byte that holds a pair of values.
    pub fn itemsize(&self) -> u32 {
        match self {
            Dtype::F64 | Dtype::I64 | Dtype::C64 => 8,
            Dtype::C128 => 16,
            Dtype::F32 | Dtype::I32 | Dtype::Other => 4,
            Dtype::F16 | Dtype::BF16 | Dtype::I16 => 2,
            Dtype::F8 | Dtype::F4 | Dtype::I8 | Dtype::U8 | Dtype::Bool => 1,
        }
    }

    /// True for the floating types that run on tensor cores at more than the TF32 rate:
    /// f16, bf16, f8 (and packed f4).
    pub fn is_low_precision(&self) -> bool {
        matches!(self, Dtype::F16 | Dtype::BF16 | Dtype::F8 | Dtype::F4)
    }
}

/// Which family of formula produced an [`OpCost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CostKind {
    /// Matrix multiply (mm, addmm, bmm, baddbmm, linear, matmul, _scaled_mm).
    Gemm,
    /// Convolution, forward or backward.
    Conv,
    /// Scaled-dot-product attention, forward or backward.
    Attention,
    /// Anything else.
    Other,
}

/// Modelled cost of one op.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpCost {
    /// Floating-point operations (a multiply-add counts 2), modelled from shapes.
    pub flops: f64,
    /// Minimum bytes moved: each tensor input read once, each output written once.
    pub min_bytes: f64,
    /// Element type of the main operand (GEMM's first matrix, conv input, attention query).
    pub dtype: Dtype,
    /// Which formula applied.
    pub kind: CostKind,
    /// `(M, N, K)` of one GEMM. Batched ops run `batch` (bmm) or `groups` (conv) of these:
    /// `flops` = 2·M·N·K·batch. For a convolution these are the implicit-GEMM dimensions
    /// of the forward pass (M = batch·output pixels, N = output channels per group,
    /// K = input channels per group · kernel size), also for its backward.
    /// `None` for attention.
    pub gemm_dims: Option<(u64, u64, u64)>,
}

/// Parse `Input Dims` into one shape per argument.
///
/// `"[[32, 10], [10, 65536], [], []]"` gives `[[32, 10], [10, 65536], [], []]`. Positions
/// stay aligned with the op's arguments: a non-tensor argument and a `TensorList`
/// (a nested list of shapes) give an empty shape, as does a shape with a non-integer
/// entry. Input that is not a JSON list gives an empty vector. Never panics.
pub fn parse_dims(raw: &str) -> Vec<Vec<i64>> {
    parse_args(raw)
        .into_iter()
        .map(|a| match a {
            Arg::Shape(s) => s,
            Arg::List(_) | Arg::Other => Vec::new(),
        })
        .collect()
}

/// Parse `Input type` (or `Concrete Inputs`): a JSON list of strings. Non-string entries
/// become `""` so positions stay aligned; input that is not a JSON list gives an empty
/// vector. Never panics.
pub fn parse_types(raw: &str) -> Vec<String> {
    Cursor::new(raw)
        .strings()
        .unwrap_or_else(|| serde_types(raw))
}

fn serde_types(raw: &str) -> Vec<String> {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s,
                _ => String::new(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Op names [`op_cost`] has a formula for.
const FORMULAS: &[&str] = &[
    "aten::mm",
    "aten::addmm",
    "aten::_addmm_activation",
    "aten::_scaled_mm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::linear",
    "aten::matmul",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d",
    "aten::conv_transpose3d",
    "aten::convolution",
    "aten::_convolution",
    "aten::_convolution_mode",
    "aten::cudnn_convolution",
    "aten::cudnn_convolution_transpose",
    "aten::miopen_convolution",
    "aten::miopen_depthwise_convolution",
    "aten::miopen_convolution_transpose",
    "aten::convolution_backward",
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention_backward",
    "aten::_scaled_dot_product_fused_attention_overrideable_backward",
];

/// True when [`op_cost`] has a formula for ops of this name.
pub fn has_formula(name: &str) -> bool {
    FORMULAS.contains(&name)
}

/// FLOPs and minimum bytes of one op, from its name and recorded inputs.
///
/// `None` when the op has no formula, when shapes were not recorded, or when the shapes
/// do not fit the formula (wrong rank, mismatched inner dimensions). The formulas:
///
/// - **GEMM** — `aten::mm(A[M,K], B[K,N])`, `aten::addmm(bias, A, B)` (also
///   `aten::_addmm_activation`), `aten::_scaled_mm(A, B, scale_a, scale_b, ...)`:
///   2·M·N·K. `aten::bmm(A[b,M,K], B[b,K,N])`, `aten::baddbmm(self, A, B)`: 2·b·M·N·K.
///   `aten::linear(x[..., K], W[N, K], bias)`: 2·M·N·K with M the product of x's leading
///   dimensions. `aten::matmul` only when both inputs are 2-D or 3-D (mm, bmm, a 3-D by
///   2-D product folded into one mm, or a 2-D by 3-D product broadcast over the batch);
///   otherwise `None` and the mm/bmm it calls carries the cost. The output is
///   `[..., M, N]` in the first matrix's type (`_scaled_mm`: bf16 for f8 inputs).
/// - **Convolution** — `aten::conv{1,2,3}d`, `aten::conv_transpose{1,2,3}d`,
///   `aten::convolution`, `aten::_convolution`, `aten::_convolution_mode`,
///   `aten::cudnn_convolution{,_transpose}`, `aten::miopen_{,depthwise_}convolution`,
///   `aten::miopen_convolution_transpose`: with input `[n, C_in, *in]` (or unbatched
///   `[C_in, *in]`) and weight `W` = `[C_out, C_in/groups, *k]`, FLOPs are
///   2·n·∏out·∏W, where `out` is the output's spatial size from stride, padding and
///   dilation in `Concrete Inputs` (`⌊(in + 2p − d(k−1) − 1)/s⌋ + 1`). A transposed
///   convolution (weight `[C_in, C_out/groups, *k]`) counts 2·n·∏in·∏W. Groups are
///   respected through the weight's shape. The output is `[n, C_out, *out]`.
/// - **Convolution backward** — `aten::convolution_backward(grad_output, input, weight,
///   bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
///   output_mask)`: each gradient enabled among input and weight in `output_mask` costs
///   as much as the forward pass (a transposed convolution of `grad_output` for the input
///   gradient, a convolution of input by `grad_output` for the weight's), so
///   `[False, True, True]` counts 1× forward and `[True, True, True]` 2×; the bias
///   gradient (a sum) is not counted. (For grouped convolutions `flop_counter.py` counts
///   the weight gradient `groups` times over; here it is counted once.) Bytes read:
///   `grad_output`, plus the weight when the input gradient is wanted, plus the input when
///   the weight gradient is; bytes written: the enabled gradients.
/// - **Attention** — `aten::scaled_dot_product_attention`, `aten::_scaled_dot_product_
///   {flash,efficient,cudnn}_attention` and kin with q `[..., L, E]`, k `[..., S, E]`,
///   v `[..., S, Ev]`: 2·B·L·S·(E + Ev), B the product of q's leading dimensions (batch ×
///   query heads, so grouped-query attention counts every query head). Causal masking is
///   ignored, as in PyTorch. Output `[..., L, Ev]`. Their `_backward` variants
///   (grad_out, q, k, v first) count the score recomputation and four products:
///   2·B·L·S·(3E + 2Ev), i.e. 2.5× forward when E = Ev; they write dq, dk, dv.
pub fn op_cost(op: &CpuOp) -> Option<OpCost> {
    let name: &str = &op.name;
    if !has_formula(name) {
        return None;
    }
    let inp = Inputs::of(op)?;
    let cost = match name {
        "aten::mm" => mm(&inp, 0, 1, None),
        "aten::addmm" | "aten::_addmm_activation" => mm(&inp, 1, 2, Some(0)),
        "aten::_scaled_mm" => scaled_mm(&inp),
        "aten::bmm" => bmm(&inp, 0, 1),
        "aten::baddbmm" => bmm(&inp, 1, 2),
        "aten::linear" => linear(&inp),
        "aten::matmul" => matmul(&inp),
        "aten::convolution_backward" => conv_backward(&inp),
        "aten::scaled_dot_product_attention"
        | "aten::_scaled_dot_product_attention_math"
        | "aten::_scaled_dot_product_flash_attention"
        | "aten::_scaled_dot_product_flash_attention_for_cpu"
        | "aten::_scaled_dot_product_efficient_attention"
        | "aten::_scaled_dot_product_cudnn_attention"
        | "aten::_scaled_dot_product_fused_attention_overrideable" => attention(&inp),
        n if n.starts_with("aten::_scaled_dot_product_") && n.ends_with("_backward") => {
            attention_backward(&inp)
        }
        n => conv_layout(n).and_then(|l| conv(&inp, &l)),
    }?;
    (cost.flops.is_finite() && cost.min_bytes.is_finite()).then_some(cost)
}

/// Minimum bytes of an op without a formula, modelled as an elementwise op: every tensor
/// input read once (the members of a `TensorList` included) plus one output as large as
/// the largest input. A model for elementwise ops (add, mul, activations, copies); it
/// undercounts ops whose output is larger than their inputs and overcounts reductions.
/// `None` when no tensor input was recorded.
pub fn min_bytes_elementwise(op: &CpuOp) -> Option<f64> {
    let inp = Inputs::of(op)?;
    // TensorList members have no recorded type: use the op's first tensor type.
    let list_item = (0..inp.args.len())
        .find_map(|i| inp.tensor(i))
        .map_or(4.0, |t| f64::from(t.dtype.itemsize()));
    let mut total = 0.0;
    let mut largest = 0.0_f64;
    let mut any = false;
    for (i, arg) in inp.args.iter().enumerate() {
        let sizes: Vec<f64> = match arg {
            Arg::Shape(_) => inp.tensor(i).map(|t| t.bytes()).into_iter().collect(),
            Arg::List(shapes) => shapes
                .iter()
                .filter(|s| s.iter().all(|&d| d >= 0))
                .map(|s| numel(s) * list_item)
                .collect(),
            Arg::Other => Vec::new(),
        };
        for b in sizes {
            any = true;
            total += b;
            largest = largest.max(b);
        }
    }
    let bytes = total + largest;
    (any && bytes.is_finite()).then_some(bytes)
}

// ---------------------------------------------------------------------------------------
// Parsing

/// One entry of `Input Dims`.
#[derive(Debug, PartialEq)]
enum Arg {
    /// A tensor's shape, or `[]` for a 0-d tensor or a non-tensor argument.
    Shape(Vec<i64>),
    /// A `TensorList`: one shape per member.
    List(Vec<Vec<i64>>),
    /// Anything else.
    Other,
}

fn parse_args(raw: &str) -> Vec<Arg> {
    Cursor::new(raw).args().unwrap_or_else(|| serde_args(raw))
}

fn serde_args(raw: &str) -> Vec<Arg> {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Array(items)) => items.iter().map(arg_of).collect(),
        _ => Vec::new(),
    }
}

/// The fast path of [`parse_args`] and [`parse_types`] (they run on every op of a
/// trace with shapes): the lists as Kineto writes them, read without building a JSON
/// value. Anything else (floats, escapes, mixed or deeper lists, invalid JSON) answers
/// `None` and serde decides, so the result is always serde's.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(raw: &'a str) -> Cursor<'a> {
        Cursor {
            b: raw.as_bytes(),
            i: 0,
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// `[item, item, ...]` with `item` reading one element; then the end of input when
    /// `top`.
    fn list<T>(
        &mut self,
        top: bool,
        mut item: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Vec<T>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        if self.peek()? == b']' {
            self.i += 1;
        } else {
            loop {
                out.push(item(self)?);
                match self.peek()? {
                    b',' => self.i += 1,
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        if top && self.peek().is_some() {
            return None;
        }
        Some(out)
    }

    /// An integer that serde reads as an `i64` (at most 18 digits, no fraction or
    /// exponent, no leading zero).
    fn int(&mut self) -> Option<i64> {
        self.ws();
        let neg = self.b.get(self.i) == Some(&b'-');
        if neg {
            self.i += 1;
        }
        let start = self.i;
        let mut v: i64 = 0;
        while let Some(&d @ b'0'..=b'9') = self.b.get(self.i) {
            v = v * 10 + i64::from(d - b'0');
            self.i += 1;
        }
        let n = self.i - start;
        if n == 0 || n > 18 || (n > 1 && self.b[start] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.b.get(self.i) {
            return None;
        }
        match (neg, v) {
            (true, 0) => None, // serde reads `-0` as a float
            (true, v) => Some(-v),
            (false, v) => Some(v),
        }
    }

    /// `Input Dims`: a list of shapes (integer lists) and lists of shapes.
    fn args(&mut self) -> Option<Vec<Arg>> {
        self.list(true, |c| {
            if c.peek()? != b'[' {
                return None;
            }
            let at = c.i;
            c.i += 1;
            let nested = c.peek()? == b'[';
            c.i = at;
            if nested {
                c.list(false, |c| c.list(false, Cursor::int)).map(Arg::List)
            } else {
                c.list(false, Cursor::int).map(Arg::Shape)
            }
        })
    }

    /// `Input type` or `Concrete Inputs`: a list of strings without escapes.
    fn strings(&mut self) -> Option<Vec<String>> {
        self.list(true, |c| {
            c.eat(b'"')?;
            let start = c.i;
            let len = c.b[start..]
                .iter()
                .position(|&x| x == b'"' || x == b'\\' || x < 0x20)?;
            c.i = start + len + 1;
            (c.b[start + len] == b'"').then_some(())?;
            // The bytes between two ASCII quotes of a `&str` are valid UTF-8.
            std::str::from_utf8(&c.b[start..start + len])
                .ok()
                .map(str::to_string)
        })
    }
}

fn arg_of(v: &Value) -> Arg {
    match v {
        Value::Array(xs) if !xs.is_empty() && xs.iter().all(Value::is_array) => {
            Arg::List(xs.iter().filter_map(shape_of).collect())
        }
        Value::Array(_) => shape_of(v).map_or(Arg::Other, Arg::Shape),
        _ => Arg::Other,
    }
}

fn shape_of(v: &Value) -> Option<Vec<i64>> {
    v.as_array()?.iter().map(Value::as_i64).collect()
}

/// Elements of a shape (1 for a 0-d tensor).
fn numel(shape: &[i64]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

/// Product of dimensions as an integer, saturating.
fn prod_u64(dims: &[i64]) -> u64 {
    dims.iter().fold(1u64, |acc, &d| {
        acc.saturating_mul(u64::try_from(d).unwrap_or(0))
    })
}

fn u(d: i64) -> u64 {
    u64::try_from(d).unwrap_or(0)
}

/// A tensor argument: its shape (all dimensions ≥ 0) and type.
#[derive(Clone, Copy)]
struct Tensor<'a> {
    shape: &'a [i64],
    dtype: Dtype,
}

impl Tensor<'_> {
    fn rank(&self) -> usize {
        self.shape.len()
    }
    fn item(&self) -> f64 {
        f64::from(self.dtype.itemsize())
    }
    fn bytes(&self) -> f64 {
        numel(self.shape) * self.item()
    }
}

/// The recorded inputs of one op, parsed.
struct Inputs {
    args: Vec<Arg>,
    types: Vec<String>,
    concrete: Vec<String>,
}

impl Inputs {
    fn of(op: &CpuOp) -> Option<Inputs> {
        let args = parse_args(op.input_dims.as_deref()?);
        if args.is_empty() {
            return None;
        }
        Some(Inputs {
            args,
            types: op
                .input_types
                .as_deref()
                .map(parse_types)
                .unwrap_or_default(),
            concrete: op
                .concrete_inputs
                .as_deref()
                .map(parse_types)
                .unwrap_or_default(),
        })
    }

    /// Argument `i` as a tensor, when it is one. Without recorded types, any non-empty
    /// shape is taken as a tensor of type [`Dtype::Other`].
    fn tensor(&self, i: usize) -> Option<Tensor<'_>> {
        let Arg::Shape(shape) = self.args.get(i)? else {
            return None;
        };
        if shape.iter().any(|&d| d < 0) {
            return None;
        }
        let dtype = if self.types.is_empty() {
            if shape.is_empty() {
                return None;
            }
            Dtype::Other
        } else {
            Dtype::from_kineto(self.types.get(i)?)?
        };
        Some(Tensor { shape, dtype })
    }

    /// Bytes of every tensor argument.
    fn tensor_bytes(&self) -> f64 {
        (0..self.args.len())
            .filter_map(|i| self.tensor(i))
            .map(|t| t.bytes())
            .sum()
    }

    /// `Concrete Inputs` entry `i`, trimmed; `None` when absent or empty.
    fn concrete(&self, i: usize) -> Option<&str> {
        let s = self.concrete.get(i)?.trim();
        (!s.is_empty()).then_some(s)
    }

    /// Entry `i` as a list of integers (`"[1, 1]"` or `"1"`).
    fn ints(&self, i: usize) -> Option<Vec<i64>> {
        list_items(self.concrete(i)?)
            .map(|x| x.parse::<i64>().ok())
            .collect()
    }

    /// Entry `i` as a list of booleans (`"[False, True, True]"`).
    fn bools(&self, i: usize) -> Option<Vec<bool>> {
        list_items(self.concrete(i)?).map(parse_bool).collect()
    }

    /// Entry `i` as one integer.
    fn int(&self, i: usize) -> Option<i64> {
        match self.ints(i)?.as_slice() {
            [x] => Some(*x),
            _ => None,
        }
    }

    /// Entry `i` as one boolean.
    fn flag(&self, i: usize) -> Option<bool> {
        match self.bools(i)?.as_slice() {
            [x] => Some(*x),
            _ => None,
        }
    }
}

/// Items of `[a, b, c]` or of a bare `a`, trimmed.
fn list_items(s: &str) -> impl Iterator<Item = &str> {
    let inner = s
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(s);
    inner.split(',').map(str::trim).filter(|x| !x.is_empty())
}

fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "True" | "true" | "1" => Some(true),
        "False" | "false" | "0" => Some(false),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// GEMM

/// The cost of `batch` GEMMs of `m×k` by `k×n`.
fn gemm(batch: u64, m: u64, n: u64, k: u64, dtype: Dtype, min_bytes: f64) -> OpCost {
    OpCost {
        flops: 2.0 * batch as f64 * m as f64 * n as f64 * k as f64,
        min_bytes,
        dtype,
        kind: CostKind::Gemm,
        gemm_dims: Some((m, n, k)),
    }
}

/// `mm`-like: A at `a`, B at `b`, an optional bias (read) at `bias`.
fn mm(inp: &Inputs, a: usize, b: usize, bias: Option<usize>) -> Option<OpCost> {
    let (x, y) = (inp.tensor(a)?, inp.tensor(b)?);
    let ([m, k], [k2, n]) = (x.shape, y.shape) else {
        return None;
    };
    if k != k2 {
        return None;
    }
    let bias_bytes = bias.and_then(|i| inp.tensor(i)).map_or(0.0, |t| t.bytes());
    let out = *m as f64 * *n as f64 * x.item();
    let bytes = x.bytes() + y.bytes() + bias_bytes + out;
    Some(gemm(1, u(*m), u(*n), u(*k), x.dtype, bytes))
}

/// `_scaled_mm(A[M,K], B[K,N], scale_a, scale_b, bias?, scale_result?, out_dtype?, ...)`:
/// every tensor input read, the output written in bf16 when the inputs are 8-bit or
/// narrower (the usual `out_dtype`), else in A's type.
fn scaled_mm(inp: &Inputs) -> Option<OpCost> {
    let (x, y) = (inp.tensor(0)?, inp.tensor(1)?);
    let ([m, k], [k2, n]) = (x.shape, y.shape) else {
        return None;
    };
    if k != k2 {
        return None;
    }
    let out_item = if x.dtype.itemsize() <= 1 {
        2.0
    } else {
        x.item()
    };
    let bytes = inp.tensor_bytes() + *m as f64 * *n as f64 * out_item;
    Some(gemm(1, u(*m), u(*n), u(*k), x.dtype, bytes))
}

/// `bmm`-like: A `[b,M,K]` at `a`, B `[b,K,N]` at `b`; any other tensor (baddbmm's self)
/// is read too.
fn bmm(inp: &Inputs, a: usize, b: usize) -> Option<OpCost> {
    let (x, y) = (inp.tensor(a)?, inp.tensor(b)?);
    let ([bx, m, k], [by, k2, n]) = (x.shape, y.shape) else {
        return None;
    };
    if k != k2 || bx != by {
        return None;
    }
    let out = *bx as f64 * *m as f64 * *n as f64 * x.item();
    let bytes = inp.tensor_bytes() + out;
    Some(gemm(u(*bx), u(*m), u(*n), u(*k), x.dtype, bytes))
}

/// `linear(x[..., K], W[N, K], bias?)`.
fn linear(inp: &Inputs) -> Option<OpCost> {
    let (x, w) = (inp.tensor(0)?, inp.tensor(1)?);
    let (lead, &[k]) = x.shape.split_at(x.rank().checked_sub(1)?) else {
        return None;
    };
    let [n, k2] = w.shape else {
        return None;
    };
    if k != *k2 {
        return None;
    }
    let m = prod_u64(lead);
    let out = numel(lead) * *n as f64 * x.item();
    let bytes = inp.tensor_bytes() + out;
    Some(gemm(1, m, u(*n), u(k), x.dtype, bytes))
}

/// `matmul(a, b)` when both are 2-D or 3-D.
fn matmul(inp: &Inputs) -> Option<OpCost> {
    let (x, y) = (inp.tensor(0)?, inp.tensor(1)?);
    let read = x.bytes() + y.bytes();
    let (batch, fold, m, k, k2, n) = match (x.shape, y.shape) {
        ([m, k], [k2, n]) => (1, 1, *m, *k, *k2, *n),
        // [b, M, K] @ [K, N]: one GEMM of (b·M)×K by K×N.
        ([b, m, k], [k2, n]) => (1, *b, *m, *k, *k2, *n),
        // [M, K] @ [b, K, N]: b GEMMs, A broadcast.
        ([m, k], [b, k2, n]) => (*b, 1, *m, *k, *k2, *n),
        ([bx, m, k], [by, k2, n]) if bx == by || *bx == 1 || *by == 1 => {
            (*bx.max(by), 1, *m, *k, *k2, *n)
        }
        _ => return None,
    };
    if k != k2 {
        return None;
    }
    let rows = u(fold).saturating_mul(u(m));
    let out = batch as f64 * fold as f64 * m as f64 * n as f64 * x.item();
    Some(gemm(u(batch), rows, u(n), u(k), x.dtype, read + out))
}

// ---------------------------------------------------------------------------------------
// Convolution

/// Where a convolution op keeps its arguments (`native_functions.yaml`).
struct ConvLayout {
    bias: Option<usize>,
    stride: usize,
    padding: usize,
    dilation: usize,
    transposed: Transposed,
    output_padding: Option<usize>,
    groups: usize,
}

enum Transposed {
    No,
    Yes,
    /// A `bool transposed` argument at this position.
    Arg(usize),
}

fn conv_layout(name: &str) -> Option<ConvLayout> {
    use Transposed::{Arg, No, Yes};
    let l = |bias, stride, padding, dilation, transposed, output_padding, groups| ConvLayout {
        bias,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    };
    Some(match name {
        // (input, weight, bias, stride, padding, dilation, groups)
        "aten::conv1d" | "aten::conv2d" | "aten::conv3d" | "aten::_convolution_mode" => {
            l(Some(2), 3, 4, 5, No, None, 6)
        }
        // (input, weight, bias, stride, padding, output_padding, groups, dilation)
        "aten::conv_transpose1d" | "aten::conv_transpose2d" | "aten::conv_transpose3d" => {
            l(Some(2), 3, 4, 7, Yes, Some(5), 6)
        }
        // (input, weight, bias, stride, padding, dilation, transposed, output_padding,
        //  groups, ...)
        "aten::convolution" | "aten::_convolution" => l(Some(2), 3, 4, 5, Arg(6), Some(7), 8),
        // (self, weight, padding, stride, dilation, groups, benchmark, deterministic,
        //  allow_tf32)
        "aten::cudnn_convolution" => l(None, 3, 2, 4, No, None, 5),
        // (self, weight, padding, output_padding, stride, dilation, groups, ...)
        "aten::cudnn_convolution_transpose" => l(None, 4, 2, 5, Yes, Some(3), 6),
        // (self, weight, bias, padding, stride, dilation, groups, benchmark, deterministic)
        "aten::miopen_convolution" | "aten::miopen_depthwise_convolution" => {
            l(Some(2), 4, 3, 5, No, None, 6)
        }
        // (self, weight, bias, padding, output_padding, stride, dilation, groups, ...)
        "aten::miopen_convolution_transpose" => l(Some(2), 5, 3, 6, Yes, Some(4), 7),
        _ => return None,
    })
}

/// Padding as recorded: numbers, or the strings `same` / `valid`.
enum Padding {
    Same,
    Explicit(Vec<i64>),
}

/// A per-spatial-dimension parameter: absent or empty gives `default`, one value is
/// broadcast, otherwise there must be one value per spatial dimension. Values must lie
/// in `0..=2^31` (which also keeps the output-size arithmetic from overflowing).
fn per_dim(inp: &Inputs, i: usize, n: usize, default: i64) -> Option<Vec<i64>> {
    if inp.concrete(i).is_none() {
        return Some(vec![default; n]);
    }
    let v = inp.ints(i)?;
    if v.iter().any(|x| !(0..=1 << 31).contains(x)) {
        return None;
    }
    match v.len() {
        1 => Some(vec![v[0]; n]),
        len if len == n => Some(v),
        _ => None,
    }
}

fn padding(inp: &Inputs, i: usize, n: usize) -> Option<Padding> {
    let s = inp.concrete(i).unwrap_or("").to_ascii_lowercase();
    if s.contains("same") {
        Some(Padding::Same)
    } else if s.contains("valid") {
        Some(Padding::Explicit(vec![0; n]))
    } else {
        per_dim(inp, i, n, 0).map(Padding::Explicit)
    }
}

/// Batch, channels and spatial size of a conv input whose weight has `nsp` spatial dims
/// (batched `[n, C, *sp]` or unbatched `[C, *sp]`).
fn conv_input(shape: &[i64], nsp: usize) -> Option<(i64, i64, &[i64])> {
    if shape.len() == nsp + 2 {
        Some((shape[0], shape[1], &shape[2..]))
    } else if shape.len() == nsp + 1 {
        Some((1, shape[0], &shape[1..]))
    } else {
        None
    }
}

fn conv(inp: &Inputs, l: &ConvLayout) -> Option<OpCost> {
    // Without the scalar arguments the output size (stride, padding) is unknown.
    if inp.concrete.is_empty() {
        return None;
    }
    let (x, w) = (inp.tensor(0)?, inp.tensor(1)?);
    let nsp = w.rank().checked_sub(2).filter(|&n| n > 0)?;
    let (n, c_in, in_sp) = conv_input(x.shape, nsp)?;
    let (w0, w1, ksp) = (w.shape[0], w.shape[1], &w.shape[2..]);
    let transposed = match l.transposed {
        Transposed::No => false,
        Transposed::Yes => true,
        Transposed::Arg(i) => inp.flag(i).unwrap_or(false),
    };
    let groups = inp.int(l.groups).unwrap_or(1);
    if groups < 1 {
        return None;
    }
    let stride = per_dim(inp, l.stride, nsp, 1)?;
    let dilation = per_dim(inp, l.dilation, nsp, 1)?;
    let pad = padding(inp, l.padding, nsp)?;
    let out_pad = match l.output_padding {
        Some(i) if transposed => per_dim(inp, i, nsp, 0)?,
        _ => vec![0; nsp],
    };
    let mut out_sp = Vec::with_capacity(nsp);
    for d in 0..nsp {
        let (i, k) = (i128::from(in_sp[d]), i128::from(ksp[d]));
        let (s, dl, op) = (
            i128::from(stride[d]),
            i128::from(dilation[d]),
            i128::from(out_pad[d]),
        );
        if s < 1 || dl < 1 || k < 1 {
            return None;
        }
        let o = match (&pad, transposed) {
            (Padding::Same, _) => i,
            (Padding::Explicit(p), false) => {
                let span = i + 2 * i128::from(p[d]) - dl * (k - 1) - 1;
                if span < 0 {
                    return None;
                }
                span / s + 1
            }
            (Padding::Explicit(p), true) => {
                (i - 1) * s - 2 * i128::from(p[d]) + dl * (k - 1) + op + 1
            }
        };
        out_sp.push(i64::try_from(o).ok().filter(|&o| o > 0)?);
    }
    // Weight: [C_out, C_in/g, *k], or [C_in, C_out/g, *k] when transposed.
    let c_out = if transposed {
        if c_in != w0 || w0 % groups != 0 {
            return None;
        }
        w1.checked_mul(groups)?
    } else {
        if Some(c_in) != w1.checked_mul(groups) {
            return None;
        }
        w0
    };
    let flops = 2.0 * n as f64 * numel(if transposed { in_sp } else { &out_sp }) * numel(w.shape);
    let bias_bytes = l
        .bias
        .and_then(|i| inp.tensor(i))
        .map_or(0.0, |t| t.bytes());
    let out_bytes = n as f64 * c_out as f64 * numel(&out_sp) * x.item();
    let gemm_dims = conv_gemm_dims(n, in_sp, &out_sp, w.shape, groups, transposed);
    Some(OpCost {
        flops,
        min_bytes: x.bytes() + w.bytes() + bias_bytes + out_bytes,
        dtype: x.dtype,
        kind: CostKind::Conv,
        gemm_dims: Some(gemm_dims),
    })
}

/// Implicit-GEMM dimensions of one group of a convolution's forward pass.
fn conv_gemm_dims(
    n: i64,
    in_sp: &[i64],
    out_sp: &[i64],
    w: &[i64],
    groups: i64,
    transposed: bool,
) -> (u64, u64, u64) {
    let k_sp = prod_u64(&w[2..]);
    let (w0, w1, g) = (u(w[0]), u(w[1]), u(groups).max(1));
    if transposed {
        // A transposed conv is the input-gradient of a conv: M = n·in pixels,
        // N = (C_out/g)·kernel, K = C_in/g.
        (
            u(n).saturating_mul(prod_u64(in_sp)),
            w1.saturating_mul(k_sp),
            w0 / g,
        )
    } else {
        (
            u(n).saturating_mul(prod_u64(out_sp)),
            w0 / g,
            w1.saturating_mul(k_sp),
        )
    }
}

/// `convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
/// dilation, transposed, output_padding, groups, output_mask)`.
fn conv_backward(inp: &Inputs) -> Option<OpCost> {
    let (go, x, w) = (inp.tensor(0)?, inp.tensor(1)?, inp.tensor(2)?);
    let nsp = w.rank().checked_sub(2).filter(|&n| n > 0)?;
    let (n, _, go_sp) = conv_input(go.shape, nsp)?;
    let (nx, _, x_sp) = conv_input(x.shape, nsp)?;
    if n != nx {
        return None;
    }
    let transposed = inp.flag(7).unwrap_or(false);
    let groups = inp.int(9).unwrap_or(1).max(1);
    let mask = inp.bools(10).unwrap_or_else(|| vec![true; 3]);
    let want = |i: usize| mask.get(i).copied().unwrap_or(false);
    let forward = 2.0 * n as f64 * numel(if transposed { x_sp } else { go_sp }) * numel(w.shape);
    let grads = f64::from(u8::from(want(0)) + u8::from(want(1)));
    let c_out = if transposed {
        w.shape[1].saturating_mul(groups)
    } else {
        w.shape[0]
    };
    let bias_grad = inp.ints(3).map_or(c_out as f64, |s| numel(&s)).max(0.0) * go.item();
    let mut bytes = go.bytes();
    if want(0) {
        bytes += w.bytes() + x.bytes(); // read weight, write grad_input
    }
    if want(1) {
        bytes += x.bytes() + w.bytes(); // read input, write grad_weight
    }
    if want(2) {
        bytes += bias_grad;
    }
    let gemm_dims = conv_gemm_dims(n, x_sp, go_sp, w.shape, groups, transposed);
    Some(OpCost {
        flops: forward * grads,
        min_bytes: bytes,
        dtype: go.dtype,
        kind: CostKind::Conv,
        gemm_dims: Some(gemm_dims),
    })
}

// ---------------------------------------------------------------------------------------
// Attention

/// `(B, L, S, E, Ev)` of q `[..., L, E]`, k `[..., S, E]`, v `[..., S, Ev]`.
fn attention_dims(
    q: Tensor<'_>,
    k: Tensor<'_>,
    v: Tensor<'_>,
) -> Option<(f64, f64, f64, f64, f64)> {
    let r = q.rank();
    if r < 2 || k.rank() != r || v.rank() != r {
        return None;
    }
    let (l, e) = (q.shape[r - 2], q.shape[r - 1]);
    let (s, ek) = (k.shape[r - 2], k.shape[r - 1]);
    let (sv, ev) = (v.shape[r - 2], v.shape[r - 1]);
    if e != ek || s != sv {
        return None;
    }
    Some((
        numel(&q.shape[..r - 2]),
        l as f64,
        s as f64,
        e as f64,
        ev as f64,
    ))
}

fn attention(inp: &Inputs) -> Option<OpCost> {
    let q = inp.tensor(0)?;
    let (b, l, s, e, ev) = attention_dims(q, inp.tensor(1)?, inp.tensor(2)?)?;
    Some(OpCost {
        flops: 2.0 * b * l * s * (e + ev),
        min_bytes: inp.tensor_bytes() + b * l * ev * q.item(),
        dtype: q.dtype,
        kind: CostKind::Attention,
        gemm_dims: None,
    })
}

fn attention_backward(inp: &Inputs) -> Option<OpCost> {
    let (q, k, v) = (inp.tensor(1)?, inp.tensor(2)?, inp.tensor(3)?);
    let (b, l, s, e, ev) = attention_dims(q, k, v)?;
    Some(OpCost {
        flops: 2.0 * b * l * s * (3.0 * e + 2.0 * ev),
        min_bytes: inp.tensor_bytes() + q.bytes() + k.bytes() + v.bytes(),
        dtype: q.dtype,
        kind: CostKind::Attention,
        gemm_dims: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OpKind;
    use proptest::prelude::*;

    fn op(name: &str, dims: &str, types: &str, concrete: &str) -> CpuOp {
        CpuOp {
            name: name.into(),
            kind: OpKind::Op,
            pid: 1,
            tid: 1,
            ts_ns: 0,
            dur_ns: 1,
            external_id: None,
            rf_id: None,
            seq: None,
            parent: None,
            depth: 0,
            py_frame: None,
            input_dims: (!dims.is_empty()).then(|| dims.into()),
            input_types: (!types.is_empty()).then(|| types.into()),
            input_strides: None,
            concrete_inputs: (!concrete.is_empty()).then(|| concrete.into()),
            call_stack: None,
        }
    }

    fn cost(name: &str, dims: &str, types: &str, concrete: &str) -> OpCost {
        match op_cost(&op(name, dims, types, concrete)) {
            Some(c) => c,
            None => panic!("no cost for {name} {dims}"),
        }
    }

    #[test]
    fn parses_dims_keeping_positions() {
        assert_eq!(
            parse_dims("[[32, 10], [10, 65536], [], []]"),
            vec![vec![32, 10], vec![10, 65536], vec![], vec![]]
        );
        // A TensorList (aten::_foreach_add_ in the H200 probe) stays one empty entry.
        assert_eq!(
            parse_dims("[[[64, 3, 3, 3], [64]], [[64, 3, 3, 3], [64]], []]"),
            vec![Vec::<i64>::new(), vec![], vec![]]
        );
        assert!(parse_dims("").is_empty());
        assert!(parse_dims("[[1, 2]").is_empty());
        assert_eq!(parse_dims("[[1.5, 2], [3]]"), vec![vec![], vec![3]]);
        assert_eq!(
            parse_types(r#"["float", "Scalar", ""]"#),
            vec!["float", "Scalar", ""]
        );
        assert!(parse_types("not json").is_empty());
    }

    #[test]
    fn dtypes_from_kineto_names() {
        assert_eq!(Dtype::from_kineto("float"), Some(Dtype::F32));
        assert_eq!(Dtype::from_kineto("double"), Some(Dtype::F64));
        assert_eq!(Dtype::from_kineto("c10::Half"), Some(Dtype::F16));
        assert_eq!(Dtype::from_kineto("c10::BFloat16"), Some(Dtype::BF16));
        assert_eq!(Dtype::from_kineto("c10::Float8_e4m3fn"), Some(Dtype::F8));
        assert_eq!(Dtype::from_kineto("c10::Float8_e5m2fnuz"), Some(Dtype::F8));
        assert_eq!(Dtype::from_kineto("long int"), Some(Dtype::I64));
        assert_eq!(Dtype::from_kineto("int"), Some(Dtype::I32));
        assert_eq!(Dtype::from_kineto("short int"), Some(Dtype::I16));
        assert_eq!(Dtype::from_kineto("signed char"), Some(Dtype::I8));
        assert_eq!(Dtype::from_kineto("unsigned char"), Some(Dtype::U8));
        assert_eq!(Dtype::from_kineto("bool"), Some(Dtype::Bool));
        assert_eq!(Dtype::from_kineto("c10::complex<float>"), Some(Dtype::C64));
        assert_eq!(Dtype::from_kineto("Scalar"), None);
        assert_eq!(Dtype::from_kineto("TensorList"), None);
        assert_eq!(Dtype::from_kineto(""), None);
        assert_eq!(Dtype::from_kineto("c10::SomethingNew"), Some(Dtype::Other));
        assert_eq!(Dtype::BF16.itemsize(), 2);
        assert_eq!(Dtype::F8.itemsize(), 1);
        assert_eq!(Dtype::I64.itemsize(), 8);
        assert!(Dtype::BF16.is_low_precision() && Dtype::F8.is_low_precision());
        assert!(!Dtype::F32.is_low_precision());
        // The analysis keys FLOPs by the lowercased Debug name.
        assert_eq!(format!("{:?}", Dtype::BF16).to_lowercase(), "bf16");
    }

    // Rows from shared/traces/h200-probe/kineto_trace.json.gz (fp32, H200).

    #[test]
    fn h200_mm_forward_and_backward() {
        // 2·32·65536·10; bytes (32·10 + 10·65536 + 32·65536)·4.
        let c = cost(
            "aten::mm",
            "[[32, 10], [10, 65536]]",
            r#"["float", "float"]"#,
            r#"["", ""]"#,
        );
        assert_eq!(c.flops, 41_943_040.0);
        assert_eq!(c.min_bytes, 11_011_328.0);
        assert_eq!(c.gemm_dims, Some((32, 65536, 10)));
        assert_eq!((c.dtype, c.kind), (Dtype::F32, CostKind::Gemm));
        // The weight gradient of the same layer: 2·10·65536·32.
        let c = cost(
            "aten::mm",
            "[[10, 32], [32, 65536]]",
            r#"["float", "float"]"#,
            r#"["", ""]"#,
        );
        assert_eq!(c.flops, 41_943_040.0);
        assert_eq!(c.min_bytes, 11_011_328.0);
        assert_eq!(c.gemm_dims, Some((10, 65536, 32)));
    }

    #[test]
    fn h200_addmm_and_linear() {
        // addmm(bias[10], x[32,65536], W^T[65536,10]): 2·32·10·65536;
        // bytes (10 + 32·65536 + 65536·10 + 32·10)·4.
        let c = cost(
            "aten::addmm",
            "[[10], [32, 65536], [65536, 10], [], []]",
            r#"["float", "float", "float", "Scalar", "Scalar"]"#,
            r#"["", "", "", "1", "1"]"#,
        );
        assert_eq!(c.flops, 41_943_040.0);
        assert_eq!(c.min_bytes, 11_011_368.0);
        assert_eq!(c.gemm_dims, Some((32, 10, 65536)));
        // The aten::linear that called it: same cost.
        let l = cost(
            "aten::linear",
            "[[32, 65536], [10, 65536], [10]]",
            r#"["float", "float", "float"]"#,
            r#"["", "", ""]"#,
        );
        assert_eq!(l, c);
    }

    #[test]
    fn h200_convolutions() {
        // cudnn_convolution(x[32,3,32,32], W[64,3,3,3], padding [1,1], stride [1,1],
        // dilation [1,1], groups 1): output 32×32, FLOPs 2·32·(32·32)·(64·3·3·3).
        let c = cost(
            "aten::cudnn_convolution",
            "[[32, 3, 32, 32], [64, 3, 3, 3], [], [], [], [], [], [], []]",
            r#"["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"]"#,
            r#"["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"]"#,
        );
        assert_eq!(c.flops, 113_246_208.0);
        // (32·3·32·32 + 64·27 + 32·64·32·32)·4
        assert_eq!(c.min_bytes, 8_788_736.0);
        assert_eq!(c.gemm_dims, Some((32 * 1024, 64, 27)));
        assert_eq!(c.kind, CostKind::Conv);
        // conv2d / convolution / _convolution above it also read the bias [64].
        let conv2d = cost(
            "aten::conv2d",
            "[[32, 3, 32, 32], [64, 3, 3, 3], [64], [], [], [], []]",
            r#"["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"]"#,
            r#"["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]"#,
        );
        assert_eq!(conv2d.flops, 113_246_208.0);
        assert_eq!(conv2d.min_bytes, 8_788_736.0 + 64.0 * 4.0);
        let convolution = cost(
            "aten::convolution",
            "[[32, 3, 32, 32], [64, 3, 3, 3], [64], [], [], [], [], [], []]",
            r#"["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]"#,
            r#"["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]"#,
        );
        assert_eq!(convolution, conv2d);
        let underscore = cost(
            "aten::_convolution",
            "[[32, 3, 32, 32], [64, 3, 3, 3], [64], [], [], [], [], [], [], [], [], [], []]",
            r#"["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]"#,
            r#"["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "False", "False", "True", "True"]"#,
        );
        assert_eq!(underscore, conv2d);
    }

    #[test]
    fn h200_convolution_backward() {
        // output_mask [False, True, True]: weight gradient only (1× forward) and bias.
        let c = cost(
            "aten::convolution_backward",
            "[[32, 64, 32, 32], [32, 3, 32, 32], [64, 3, 3, 3], [], [], [], [], [], [], [], []]",
            r#"["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", "ScalarList"]"#,
            r#"["", "", "", "[64]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, True]"]"#,
        );
        assert_eq!(c.flops, 113_246_208.0);
        // read grad_output and input, write grad_weight and grad_bias:
        // (32·64·1024 + 32·3·1024 + 64·27 + 64)·4
        assert_eq!(c.min_bytes, 8_788_992.0);
        assert_eq!(c.gemm_dims, Some((32 * 1024, 64, 27)));
        // Both gradients: 2× forward.
        let both = cost(
            "aten::convolution_backward",
            "[[32, 64, 32, 32], [32, 3, 32, 32], [64, 3, 3, 3], [], [], [], [], [], [], [], []]",
            r#"["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", "ScalarList"]"#,
            r#"["", "", "", "[64]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"]"#,
        );
        assert_eq!(both.flops, 2.0 * 113_246_208.0);
    }

    // Rows from shared/traces/real/tracelens-h100-gaunernst_bert-small-uncased-1016001
    // (bf16 inference on an H100) and tracelens-b200-eager_trace (bf16, B200).

    #[test]
    fn bert_bf16_gemms() {
        let c = cost(
            "aten::addmm",
            "[[512], [141, 512], [512, 512], [], []]",
            r#"["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]"#,
            r#"["", "", "", "1", "1"]"#,
        );
        assert_eq!(c.flops, 73_924_608.0); // 2·141·512·512
        assert_eq!(c.min_bytes, 814_080.0); // (512 + 141·512 + 512·512 + 141·512)·2
        assert_eq!(c.dtype, Dtype::BF16);
        // The vocabulary projection, through aten::linear with a 3-D input.
        let c = cost(
            "aten::linear",
            "[[1, 141, 512], [30522, 512], [30522]]",
            r#"["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]"#,
            r#"["", "", ""]"#,
        );
        assert_eq!(c.flops, 4_406_888_448.0); // 2·141·30522·512
        assert_eq!(c.gemm_dims, Some((141, 30522, 512)));
        // B200 logits: aten::matmul of [1,2880] by [2880,25136] and the mm it calls.
        let mm = cost(
            "aten::mm",
            "[[1, 2880], [2880, 25136]]",
            r#"["c10::BFloat16", "c10::BFloat16"]"#,
            r#"["", ""]"#,
        );
        assert_eq!(mm.flops, 144_783_360.0);
        assert_eq!(mm.min_bytes, 144_839_392.0);
        let matmul = cost(
            "aten::matmul",
            "[[1, 2880], [2880, 25136]]",
            r#"["c10::BFloat16", "c10::BFloat16"]"#,
            r#"["", ""]"#,
        );
        assert_eq!(matmul, mm);
    }

    #[test]
    fn bert_bf16_attention() {
        // q, k, v [1, 8, 141, 64]: 2·8·141·141·(64 + 64); bytes (4 · 8·141·64)·2.
        let sdpa = cost(
            "aten::scaled_dot_product_attention",
            "[[1, 8, 141, 64], [1, 8, 141, 64], [1, 8, 141, 64], [], [], [], [], []]",
            r#"["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "", "Scalar", "Scalar", "", "Scalar"]"#,
            r#"["", "", "", "", "0.", "False", "", "False"]"#,
        );
        assert_eq!(sdpa.flops, 40_716_288.0);
        assert_eq!(sdpa.min_bytes, 577_536.0);
        assert_eq!((sdpa.kind, sdpa.dtype), (CostKind::Attention, Dtype::BF16));
        let flash = cost(
            "aten::_scaled_dot_product_flash_attention",
            "[[1, 8, 141, 64], [1, 8, 141, 64], [1, 8, 141, 64], [], [], [], []]",
            r#"["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar", "Scalar", "Scalar"]"#,
            r#"["", "", "", "0.", "False", "False", "0.125"]"#,
        );
        assert_eq!(flash, sdpa);
        // Backward (grad_out, q, k, v, out, logsumexp, ...): 2.5× forward.
        let bwd = cost(
            "aten::_scaled_dot_product_flash_attention_backward",
            "[[1, 8, 141, 64], [1, 8, 141, 64], [1, 8, 141, 64], [1, 8, 141, 64], [1, 8, 141, 64], [1, 8, 141], [], [], [], [], [], [], [], []]",
            r#"["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "long int", "long int"]"#,
            "",
        );
        assert_eq!(bwd.flops, 2.5 * 40_716_288.0);
        // read grad_out, q, k, v, out (5·8·141·64·2) and logsumexp (8·141·4);
        // write dq, dk, dv (3·8·141·64·2),
        // and the two 0-d philox tensors (2·8)
        assert_eq!(
            bwd.min_bytes,
            8.0 * 72_192.0 * 2.0 + 8.0 * 141.0 * 4.0 + 16.0
        );
    }

    #[test]
    fn batched_and_grouped_shapes() {
        let c = cost(
            "aten::bmm",
            "[[4, 8, 16], [4, 16, 32]]",
            r#"["c10::Half", "c10::Half"]"#,
            "",
        );
        assert_eq!(c.flops, 2.0 * 4.0 * 8.0 * 32.0 * 16.0);
        assert_eq!(
            c.min_bytes,
            (4.0 * 8.0 * 16.0 + 4.0 * 16.0 * 32.0 + 4.0 * 8.0 * 32.0) * 2.0
        );
        assert_eq!(c.gemm_dims, Some((8, 32, 16)));
        let b = cost(
            "aten::baddbmm",
            "[[4, 8, 32], [4, 8, 16], [4, 16, 32], [], []]",
            r#"["c10::Half", "c10::Half", "c10::Half", "Scalar", "Scalar"]"#,
            "",
        );
        assert_eq!(b.flops, c.flops);
        assert_eq!(b.min_bytes, c.min_bytes + 4.0 * 8.0 * 32.0 * 2.0);
        // matmul [b, M, K] @ [K, N] folds into one GEMM of b·M rows.
        let m = cost(
            "aten::matmul",
            "[[4, 8, 16], [16, 32]]",
            r#"["float", "float"]"#,
            "",
        );
        assert_eq!(m.flops, c.flops);
        assert_eq!(m.gemm_dims, Some((32, 32, 16)));
        // 4-D matmul is left to the bmm it calls.
        assert!(op_cost(&op(
            "aten::matmul",
            "[[2, 4, 8, 16], [2, 4, 16, 32]]",
            r#"["float", "float"]"#,
            ""
        ))
        .is_none());
        // Mismatched inner dimensions: no cost.
        assert!(op_cost(&op(
            "aten::mm",
            "[[2, 3], [4, 5]]",
            r#"["float", "float"]"#,
            ""
        ))
        .is_none());
        // Depthwise conv, stride 2: weight [32, 1, 3, 3], groups 32, 56×56 → 28×28.
        let dw = cost(
            "aten::conv2d",
            "[[8, 32, 56, 56], [32, 1, 3, 3], [], [], [], [], []]",
            r#"["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]"#,
            r#"["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "32"]"#,
        );
        assert_eq!(dw.flops, 2.0 * 8.0 * 28.0 * 28.0 * 32.0 * 9.0);
        assert_eq!(dw.gemm_dims, Some((8 * 28 * 28, 1, 9)));
        // Transposed conv: [2, 16, 8, 8] with weight [16, 8, 4, 4], stride 2, padding 1
        // → [2, 8, 16, 16]; FLOPs 2·n·∏in·∏W.
        let t = cost(
            "aten::convolution",
            "[[2, 16, 8, 8], [16, 8, 4, 4], [], [], [], [], [], [], []]",
            r#"["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]"#,
            r#"["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1"]"#,
        );
        assert_eq!(t.flops, 2.0 * 2.0 * 64.0 * (16.0 * 8.0 * 16.0));
        let out = 2.0 * 8.0 * 16.0 * 16.0;
        assert_eq!(
            t.min_bytes,
            (2.0 * 16.0 * 64.0 + 16.0 * 8.0 * 16.0 + out) * 4.0
        );
        // Forward conv without Concrete Inputs: stride unknown, no cost.
        assert!(op_cost(&op(
            "aten::conv2d",
            "[[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []]",
            r#"["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]"#,
            ""
        ))
        .is_none());
    }

    #[test]
    fn elementwise_bytes_and_no_formula() {
        // aten::add_ style: two fp32 tensors of 1000 elements and a scalar.
        let o = op(
            "aten::add",
            "[[10, 100], [10, 100], []]",
            r#"["float", "float", "Scalar"]"#,
            r#"["", "", "1"]"#,
        );
        assert!(!has_formula("aten::add"));
        assert!(op_cost(&o).is_none());
        assert_eq!(min_bytes_elementwise(&o), Some(12_000.0));
        // _foreach_add_ from the H200 probe: two TensorLists, types unrecorded per member.
        let f = op(
            "aten::_foreach_add_",
            "[[[64, 3, 3, 3], [64], [10, 65536], [10]], [[64, 3, 3, 3], [64], [10, 65536], [10]], []]",
            r#"["TensorList", "TensorList", "Scalar"]"#,
            r#"["", "", "-0.01"]"#,
        );
        let list = (1728.0 + 64.0 + 655_360.0 + 10.0) * 4.0;
        assert_eq!(
            min_bytes_elementwise(&f),
            Some(2.0 * list + 655_360.0 * 4.0)
        );
        // A 0-d tensor is one element; no shapes, no bytes.
        let z = op("aten::mul", "[[], []]", r#"["float", "Scalar"]"#, "");
        assert_eq!(min_bytes_elementwise(&z), Some(8.0));
        assert_eq!(min_bytes_elementwise(&op("aten::mul", "", "", "")), None);
    }

    #[test]
    fn every_formula_name_is_known() {
        for name in FORMULAS {
            let o = op(
                name,
                "[[2, 3, 4, 4], [5, 3, 3, 3], [5]]",
                "",
                "[\"\", \"\", \"\"]",
            );
            let _ = op_cost(&o);
            assert!(has_formula(name));
        }
    }

    fn shapes() -> impl Strategy<Value = String> {
        let dim = prop_oneof![Just(0i64), 1i64..70_000, Just(-1), Just(i64::MAX)];
        let shape = proptest::collection::vec(dim, 0..6);
        proptest::collection::vec(shape, 0..12)
            .prop_map(|v| serde_json::to_string(&v).unwrap_or_default())
    }

    /// Pieces of `Input Dims` and `Input type` as Kineto writes them, and of what it
    /// does not (floats, escapes, `-0`, leading zeros, control characters, literals).
    fn json_ish() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("["),
            Just("]"),
            Just(","),
            Just(", "),
            Just(" "),
            Just("\n"),
            Just("\t"),
            Just("0"),
            Just("7"),
            Just("-3"),
            Just("-0"),
            Just("01"),
            Just("1.5"),
            Just("2e3"),
            Just("123456789012345678"),
            Just("1234567890123456789"),
            Just("-"),
            Just("null"),
            Just("\"float\""),
            Just("\"\""),
            Just("\"a\\\"b\""),
            Just("\"x\ny\""),
            Just("\"é\""),
            Just("\"[1, 2]\""),
            Just("\"")
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
    }

    #[test]
    fn kineto_lists_take_the_fast_path() {
        let dims = "[[2048, 768], [768], [], [[1, 2], [3]], [-1]]";
        assert_eq!(
            Cursor::new(dims).args(),
            Some(vec![
                Arg::Shape(vec![2048, 768]),
                Arg::Shape(vec![768]),
                Arg::Shape(vec![]),
                Arg::List(vec![vec![1, 2], vec![3]]),
                Arg::Shape(vec![-1]),
            ])
        );
        let types = r#"["float", "", "Scalar", "[1, 1]"]"#;
        assert_eq!(
            Cursor::new(types).strings(),
            Some(vec![
                "float".into(),
                "".into(),
                "Scalar".into(),
                "[1, 1]".into()
            ])
        );
        // Left to serde: a float, an escape, `-0`, trailing bytes.
        for odd in ["[[1.5]]", "[[-0]]", "[[1]] x", "[[1], 2]"] {
            assert_eq!(Cursor::new(odd).args(), None, "{odd}");
        }
        assert_eq!(Cursor::new(r#"["a\"b"]"#).strings(), None);
    }

    proptest! {
        #[test]
        fn the_fast_path_reads_what_serde_reads(s in json_ish(), dims in shapes()) {
            for s in [s.as_str(), dims.as_str()] {
                if let Some(fast) = Cursor::new(s).args() {
                    prop_assert_eq!(fast, serde_args(s), "{:?}", s);
                }
                if let Some(fast) = Cursor::new(s).strings() {
                    prop_assert_eq!(fast, serde_types(s), "{:?}", s);
                }
            }
        }

        #[test]
        fn parsing_never_panics(s in ".*") {
            let _ = parse_dims(&s);
            let _ = parse_types(&s);
            for name in FORMULAS {
                let _ = op_cost(&op(name, &s, &s, &s));
            }
            let _ = min_bytes_elementwise(&op("aten::add", &s, &s, &s));
        }

        #[test]
        fn formulas_never_panic_on_odd_shapes(
            dims in shapes(),
            ty in prop_oneof![Just("float"), Just("c10::BFloat16"), Just("Scalar"), Just("")],
            conc in prop_oneof![Just(""), Just("[0, 0]"), Just("[-3]"), Just("[9223372036854775807, 1]"), Just("False"), Just("1"), Just("'same'")],
            name_i in 0..FORMULAS.len(),
        ) {
            let types = serde_json::to_string(&vec![ty; 12]).unwrap_or_default();
            let concrete = serde_json::to_string(&vec![conc; 12]).unwrap_or_default();
            if let Some(c) = op_cost(&op(FORMULAS[name_i], &dims, &types, &concrete)) {
                prop_assert!(c.flops >= 0.0 && c.flops.is_finite());
                prop_assert!(c.min_bytes >= 0.0 && c.min_bytes.is_finite());
            }
            let _ = min_bytes_elementwise(&op("aten::add", &dims, &types, &concrete));
        }
    }
}
