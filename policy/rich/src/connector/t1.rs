//! The restricted T1 transformation profile (RICH §9.3): a JMESPath expression over the
//! source payload, evaluated with the `jmespath` crate, inside limits a hostile expression
//! or payload cannot get past. The profile is written out in docs/decisions.md ("T1
//! connector profile"); in short:
//!
//! - **Pure.** JMESPath has no I/O, clock or randomness; the functions allowed are the
//!   builtins that neither compute new numbers nor depend on anything but their arguments
//!   ([`ALLOWED_FUNCTIONS`]). `abs`, `avg`, `ceil`, `floor`, `sum`, `min`, `max` and
//!   `to_number` are left out: they compute in `f64` and would round.
//! - **Numbers are never rounded.** A payload holding an integer beyond ±2^53 is refused
//!   before evaluation (comparisons run in `f64`, where such integers collide); numbers pass
//!   through a transform unchanged otherwise.
//! - **Null and missing are one.** JMESPath yields `null` for a missing member; a target
//!   member that must be present is the target contract's business (validated after).
//! - **Bounded work.** The expression is at most [`Limits::max_expression`] bytes with at
//!   most [`Limits::max_nesting`] open brackets (the parser recurses on them), its tree at
//!   most [`Limits::max_depth`] deep (the interpreter recurses on it), and its *fan-out* — how
//!   many times over any value of the input can appear in an intermediate or final result,
//!   computed from the tree — at most [`Limits::max_fanout`]. JMESPath has no loops, so with
//!   the fan-out bounded, time and memory are linear in the payload's size times the
//!   expression's; the output is measured again after evaluation, against
//!   [`Limits::max_output`].

use std::sync::LazyLock;

use jmespath::ast::Ast;
use jmespath::functions;
use jmespath::{Expression, Runtime};
use serde_json::Value;

/// The builtins a T1 expression may call.
pub const ALLOWED_FUNCTIONS: &[&str] = &[
    "contains",
    "ends_with",
    "join",
    "keys",
    "length",
    "map",
    "max_by",
    "merge",
    "min_by",
    "not_null",
    "reverse",
    "sort",
    "sort_by",
    "starts_with",
    "to_array",
    "to_string",
    "type",
    "values",
];

/// The largest integer a payload may hold: beyond it `f64` comparisons are inexact.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    let mut rt = Runtime::new();
    rt.register_function("contains", Box::new(functions::ContainsFn::new()));
    rt.register_function("ends_with", Box::new(functions::EndsWithFn::new()));
    rt.register_function("join", Box::new(functions::JoinFn::new()));
    rt.register_function("keys", Box::new(functions::KeysFn::new()));
    rt.register_function("length", Box::new(functions::LengthFn::new()));
    rt.register_function("map", Box::new(functions::MapFn::new()));
    rt.register_function("max_by", Box::new(functions::MaxByFn::new()));
    rt.register_function("merge", Box::new(functions::MergeFn::new()));
    rt.register_function("min_by", Box::new(functions::MinByFn::new()));
    rt.register_function("not_null", Box::new(functions::NotNullFn::new()));
    rt.register_function("reverse", Box::new(functions::ReverseFn::new()));
    rt.register_function("sort", Box::new(functions::SortFn::new()));
    rt.register_function("sort_by", Box::new(functions::SortByFn::new()));
    rt.register_function("starts_with", Box::new(functions::StartsWithFn::new()));
    rt.register_function("to_array", Box::new(functions::ToArrayFn::new()));
    rt.register_function("to_string", Box::new(functions::ToStringFn::new()));
    rt.register_function("type", Box::new(functions::TypeFn::new()));
    rt.register_function("values", Box::new(functions::ValuesFn::new()));
    rt
});

/// The profile's resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of expression text.
    pub max_expression: usize,
    /// Brackets (`(`, `[`, `{`) open at once in the text.
    pub max_nesting: usize,
    /// Depth of the parsed expression tree.
    pub max_depth: usize,
    /// How many times over the input may appear in a result (see the module docs).
    pub max_fanout: u64,
    /// Depth of the payload, in arrays and objects.
    pub max_input_depth: usize,
    /// Values (scalars, arrays and objects, each counted once per appearance) in the output.
    pub max_output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_expression: 1024,
            max_nesting: 16,
            max_depth: 32,
            max_fanout: 64,
            max_input_depth: 64,
            max_output: 100_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum T1Error {
    #[error("the expression is {0} bytes; the T1 profile allows {1}")]
    TooLong(usize, usize),
    #[error("the expression nests more than {0} brackets")]
    TooNested(usize),
    #[error("the expression does not parse: {0}")]
    Parse(String),
    #[error("the expression's tree is deeper than {0}")]
    TooDeep(usize),
    #[error("`{0}` is not a function of the T1 profile")]
    Function(String),
    #[error("the expression can repeat its input {0} times over; the T1 profile allows {1}")]
    Fanout(u64, u64),
    #[error("the payload holds an integer beyond ±2^53 at {0}: it would be rounded")]
    UnsafeInteger(String),
    #[error("the payload nests deeper than {0}")]
    InputTooDeep(usize),
    #[error("the transform failed: {0}")]
    Eval(String),
    #[error("the transform's output has more than {0} values")]
    OutputTooLarge(usize),
}

/// A compiled T1 transform.
pub struct T1 {
    expression: Expression<'static>,
    fanout: u64,
    limits: Limits,
}

impl std::fmt::Debug for T1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("T1")
            .field("expression", &self.expression.as_str())
            .field("fanout", &self.fanout)
            .finish()
    }
}

impl T1 {
    /// Checks `text` against the profile and compiles it.
    pub fn compile(text: &str, limits: Limits) -> Result<T1, T1Error> {
        if text.len() > limits.max_expression {
            return Err(T1Error::TooLong(text.len(), limits.max_expression));
        }
        // Before the parser sees it: it recurses once per open bracket. Brackets inside
        // quoted names and literals count too, which can only refuse more.
        let mut open = 0usize;
        for b in text.bytes() {
            match b {
                b'(' | b'[' | b'{' => {
                    open += 1;
                    if open > limits.max_nesting {
                        return Err(T1Error::TooNested(limits.max_nesting));
                    }
                }
                b')' | b']' | b'}' => open = open.saturating_sub(1),
                _ => {}
            }
        }
        let expression = RUNTIME
            .compile(text)
            .map_err(|e| T1Error::Parse(e.to_string()))?;
        let fanout = check(expression.as_ast(), 0, &limits)?;
        if fanout > limits.max_fanout {
            return Err(T1Error::Fanout(fanout, limits.max_fanout));
        }
        Ok(T1 {
            expression,
            fanout,
            limits,
        })
    }

    /// The expression's fan-out (see the module docs).
    pub fn fanout(&self) -> u64 {
        self.fanout
    }

    /// Transforms `input`: refused when it holds an unsafe integer or nests too deep, or
    /// when the output is too large.
    pub fn apply(&self, input: &Value) -> Result<Value, T1Error> {
        inspect(input, 0, &mut String::new(), &self.limits)?;
        let out = self
            .expression
            .search(input)
            .map_err(|e| T1Error::Eval(e.to_string()))?;
        let mut budget = self.limits.max_output;
        count(&out, &mut budget).ok_or(T1Error::OutputTooLarge(self.limits.max_output))?;
        serde_json::to_value(&*out).map_err(|e| T1Error::Eval(e.to_string()))
    }
}

/// Checks a tree's depth and functions; gives its fan-out, saturating.
fn check(ast: &Ast, depth: usize, limits: &Limits) -> Result<u64, T1Error> {
    if depth > limits.max_depth {
        return Err(T1Error::TooDeep(limits.max_depth));
    }
    let d = depth + 1;
    let one = |a: &Ast| check(a, d, limits);
    Ok(match ast {
        Ast::Identity { .. }
        | Ast::Field { .. }
        | Ast::Index { .. }
        | Ast::Slice { .. }
        | Ast::Literal { .. } => 1,
        // A predicate's result is a boolean or its operand: no more than its operands.
        Ast::Comparison { lhs, rhs, .. } | Ast::And { lhs, rhs, .. } | Ast::Or { lhs, rhs, .. } => {
            one(lhs)?.max(one(rhs)?)
        }
        Ast::Not { node, .. } => {
            one(node)?;
            1
        }
        Ast::Condition {
            predicate, then, ..
        } => {
            one(predicate)?;
            one(then)?
        }
        Ast::Expref { ast, .. } => one(ast)?,
        Ast::Flatten { node, .. } | Ast::ObjectValues { node, .. } => one(node)?,
        // Each element of the left side goes through the right side.
        Ast::Projection { lhs, rhs, .. } | Ast::Subexpr { lhs, rhs, .. } => {
            one(lhs)?.saturating_mul(one(rhs)?)
        }
        Ast::MultiList { elements, .. } => elements
            .iter()
            .try_fold(0u64, |acc, e| Ok::<_, T1Error>(acc.saturating_add(one(e)?)))?,
        Ast::MultiHash { elements, .. } => elements.iter().try_fold(0u64, |acc, kv| {
            Ok::<_, T1Error>(acc.saturating_add(one(&kv.value)?))
        })?,
        Ast::Function { name, args, .. } => {
            if !ALLOWED_FUNCTIONS.contains(&name.as_str()) {
                return Err(T1Error::Function(name.clone()));
            }
            let mut fan = Vec::with_capacity(args.len());
            for a in args {
                fan.push(one(a)?);
            }
            match name.as_str() {
                // Their result is one of their arguments' elements, or a fixed-size scalar.
                "contains" | "ends_with" | "starts_with" | "length" | "type" | "max_by"
                | "min_by" => fan.iter().copied().max().unwrap_or(1),
                // Each element of the array through the expression.
                "map" => fan.iter().product::<u64>().max(1),
                // The arguments, rearranged or joined.
                _ => fan.iter().fold(0u64, |a, f| a.saturating_add(*f)).max(1),
            }
        }
    })
}

/// Refuses integers beyond ±2^53 and payloads deeper than the limit; `at` is the JSON
/// pointer of the value (for the error).
fn inspect(v: &Value, depth: usize, at: &mut String, limits: &Limits) -> Result<(), T1Error> {
    if depth > limits.max_input_depth {
        return Err(T1Error::InputTooDeep(limits.max_input_depth));
    }
    match v {
        Value::Number(n) => {
            let safe = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u <= MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() <= MAX_SAFE_INTEGER,
                // A float: passed through as written, never computed on.
                (None, None) => true,
            };
            if !safe {
                return Err(T1Error::UnsafeInteger(if at.is_empty() {
                    "/".into()
                } else {
                    at.clone()
                }));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                inspect(item, depth + 1, at, limits)?;
                at.truncate(len);
            }
        }
        Value::Object(members) => {
            for (k, item) in members {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                inspect(item, depth + 1, at, limits)?;
                at.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Counts the output's values against `budget`, each shared value once per appearance
/// (which is what serialising it would write); `None` when the budget runs out.
fn count(v: &jmespath::Variable, budget: &mut usize) -> Option<()> {
    *budget = budget.checked_sub(1)?;
    match v {
        jmespath::Variable::Array(items) => items.iter().try_for_each(|i| count(i, budget)),
        jmespath::Variable::Object(members) => members.values().try_for_each(|i| count(i, budget)),
        _ => Some(()),
    }
}

#[cfg(test)]
mod tests;
