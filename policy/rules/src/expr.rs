//! A rule's `when`: a CEL expression, compiled when its file loads and vetted for what the
//! sidecar can promise about it: it names only the variables SPEC §15 defines (a typo is a
//! refused file, not a rule that fails on every write), it can be a boolean, and its cost is
//! linear in the facts it reads.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::Value;
use cel::{Context, Program};

/// The variables a `when` may read (SPEC §15).
pub const VARIABLES: [&str; 11] = [
    "caller",
    "operation",
    "resource",
    "method",
    "path",
    "query",
    "body",
    "lease",
    "tool",
    "headers",
    "now",
];

/// Longest expression accepted, in bytes.
const MAX_SOURCE: usize = 4096;
/// Deepest expression tree accepted (the evaluator recurses on it).
const MAX_DEPTH: usize = 48;

/// A compiled, vetted `when`.
pub(crate) struct Condition {
    program: Program,
    /// The expression judged on the facts directly, when it has the shape that allows it.
    pub fast: Option<crate::fast::Fast>,
    /// Which of [`VARIABLES`] it reads (bit `i` for `VARIABLES[i]`): only those are made.
    pub uses: u16,
    /// Which of the body's members it reads.
    pub body: BodyUse,
}

/// What an expression reads of `body`: named top-level members only (`body.amount`,
/// `has(body.lines)`), or the whole of it (`body == null`, `body["x"]`, `size(body)`). Only
/// what some rule reads is made into CEL values: a body's other members cost nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyUse {
    pub whole: bool,
    pub members: Vec<String>,
}

impl BodyUse {
    pub fn join(&mut self, other: &BodyUse) {
        self.whole |= other.whole;
        for m in &other.members {
            if !self.members.contains(m) {
                self.members.push(m.clone());
            }
        }
    }
}

/// Why a `when` was refused, and where in the expression (1-based line and column) when the
/// parser says.
#[derive(Debug)]
pub(crate) struct Refused {
    pub why: String,
    pub at: Option<(usize, usize)>,
}

impl From<String> for Refused {
    fn from(why: String) -> Self {
        Refused { why, at: None }
    }
}

impl From<&str> for Refused {
    fn from(why: &str) -> Self {
        Refused {
            why: why.to_owned(),
            at: None,
        }
    }
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Condition")
    }
}

impl Condition {
    pub fn compile(source: &str) -> Result<Condition, Refused> {
        if source.len() > MAX_SOURCE {
            return Err(format!("{} bytes; at most {MAX_SOURCE}", source.len()).into());
        }
        if source.trim().is_empty() {
            return Err("empty; leave `when` out to match every write".into());
        }
        let program = Program::compile(source).map_err(|e| {
            let first = e.errors.first();
            Refused {
                why: format!(
                    "does not compile: {}",
                    first.map_or("syntax error", |p| p.msg.as_str())
                ),
                at: first.and_then(|p| {
                    let line = usize::try_from(p.pos.0).ok().filter(|l| *l > 0)?;
                    let col = usize::try_from(p.pos.1).ok()?;
                    Some((line, col + 1))
                }),
            }
        })?;
        let root = program.expression();
        if let Some(kind) = never_boolean(&root.expr) {
            return Err(format!("is not a boolean: it is {kind}").into());
        }
        let mut body = BodyUse::default();
        vet(root, &mut Vec::new(), &mut body, 0, 0)?;
        let refs = program.references();
        let uses = VARIABLES
            .iter()
            .enumerate()
            .filter(|(_, v)| refs.has_variable(v))
            .fold(0u16, |m, (i, _)| m | (1 << i));
        let fast = crate::fast::Fast::of(root);
        Ok(Condition {
            program,
            fast,
            uses,
            body,
        })
    }

    /// Evaluates the expression; `Err` (with why) when it fails or is not a boolean. A panic
    /// inside the evaluator is caught and is a failure too: the facts come from a client.
    pub fn holds(&self, context: &Context<'_, '_>) -> Result<bool, String> {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.program.execute(context)
        }));
        match run {
            Ok(Ok(Value::Bool(b))) => Ok(b),
            Ok(Ok(other)) => Err(format!("evaluated to a {}, not a bool", other.type_of())),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the evaluator failed".into()),
        }
    }
}

/// What a root expression certainly is when it cannot be a boolean: a literal of another
/// type, a list or map literal, arithmetic. (A member or a function may still turn out not to
/// be one; that fails when evaluated.)
fn never_boolean(e: &Expr) -> Option<&'static str> {
    use cel::common::ast::LiteralValue;
    match e {
        Expr::Literal(LiteralValue::Boolean(_)) => None,
        Expr::Literal(_) => Some("a constant of another type"),
        Expr::List(_) => Some("a list"),
        Expr::Map(_) => Some("a map"),
        Expr::Call(c)
            if matches!(
                c.func_name.as_str(),
                "_+_" | "_-_" | "_*_" | "_/_" | "_%_" | "-_"
            ) =>
        {
            Some("arithmetic")
        }
        _ => None,
    }
}

/// Walks the tree: known variables only (or a comprehension's own), no struct literals, at
/// most one comprehension on any path, bounded depth.
fn vet(
    e: &IdedExpr,
    bound: &mut Vec<String>,
    body: &mut BodyUse,
    comprehensions: usize,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} deep"));
    }
    let d = depth + 1;
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => Ok(()),
        Expr::Ident(name) => {
            if name == "body" && !bound.iter().any(|b| b == name) {
                body.whole = true;
            }
            if VARIABLES.contains(&name.as_str()) || bound.iter().any(|b| b == name) {
                Ok(())
            } else {
                Err(format!(
                    "unknown variable `{name}` (the variables are {})",
                    VARIABLES.join(", ")
                ))
            }
        }
        Expr::Select(s) => match &s.operand.expr {
            Expr::Ident(n) if n == "body" && !bound.iter().any(|b| b == n) => {
                if !body.members.contains(&s.field) {
                    body.members.push(s.field.clone());
                }
                Ok(())
            }
            _ => vet(&s.operand, bound, body, comprehensions, d),
        },
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                vet(t, bound, body, comprehensions, d)?;
            }
            c.args
                .iter()
                .try_for_each(|a| vet(a, bound, body, comprehensions, d))
        }
        Expr::List(l) => l
            .elements
            .iter()
            .try_for_each(|x| vet(x, bound, body, comprehensions, d)),
        Expr::Map(m) => m.entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(me) => {
                vet(&me.key, bound, body, comprehensions, d)?;
                vet(&me.value, bound, body, comprehensions, d)
            }
            EntryExpr::StructField(_) => Err("struct literals are not supported".into()),
        }),
        Expr::Struct(_) => Err("struct literals are not supported".into()),
        Expr::Comprehension(c) => {
            if comprehensions >= 1 {
                return Err(
                    "a comprehension (all, exists, exists_one, map, filter) inside another: \
                     its cost would grow with the square of the body"
                        .into(),
                );
            }
            // The range is evaluated outside the loop; the rest once per element.
            vet(&c.iter_range, bound, body, comprehensions, d)?;
            vet(&c.accu_init, bound, body, comprehensions, d)?;
            let added = 2 + usize::from(c.iter_var2.is_some());
            bound.push(c.iter_var.clone());
            bound.push(c.accu_var.clone());
            if let Some(v2) = &c.iter_var2 {
                bound.push(v2.clone());
            }
            let inner = [&c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .try_for_each(|x| vet(x, bound, body, comprehensions + 1, d));
            bound.truncate(bound.len() - added);
            inner
        }
    }
}
