//! The common shape of a `when` judged without CEL's interpreter: comparisons of a fact (or a
//! member of the body, the tool's annotations, a header) with a constant, `has()`, `in`,
//! `startsWith`/`endsWith`/`contains`, joined by `&&`, `||` and `!`. Most operator rules are
//! this shape ("orders over 10,000", "the experiments namespace", "destructive tools"), and
//! judging them on the facts as they are, with no CEL value made, is what keeps 20 rules
//! within the write's budget (issue 56: ≤ 5 µs).
//!
//! It never decides differently from CEL: [`Fast::eval`] answers only when the answer is
//! certain (the operands have the types the operator takes, the members exist) and says
//! "don't know" (`None`) otherwise: a missing member, a type mismatch, anything CEL might
//! report as an error or decide by a rule this does not model. The caller then asks CEL. A
//! test compares both on every expression and fact it has.

use serde_json::Value;

use crate::facts::Facts;

mod compile;

/// A `when`, in the shape judged here.
#[derive(Debug)]
pub(crate) enum Fast {
    Const(bool),
    And(Box<Fast>, Box<Fast>),
    Or(Box<Fast>, Box<Fast>),
    Not(Box<Fast>),
    Cmp(Cmp, Operand, Operand),
    /// `has(path.field)`.
    Has(Path, String),
    /// `needle in haystack` (a map's keys, a list's elements).
    In(Operand, Operand),
    /// `target.startsWith(arg)` and its kin.
    Str(StrFn, Operand, Operand),
    /// A member that is itself a boolean: `tool.annotations.destructiveHint`.
    Bool(Path),
    /// `list.exists(x, pred)` (`all: false`) or `list.all(x, pred)` over a JSON array.
    Each {
        all: bool,
        range: Path,
        pred: Box<Fast>,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum StrFn {
    StartsWith,
    EndsWith,
    Contains,
}

#[derive(Debug)]
pub(crate) enum Operand {
    Lit(Lit),
    Path(Path),
    List(Vec<Lit>),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(String),
}

/// A variable and the members and indexes read from it.
#[derive(Debug)]
pub(crate) struct Path {
    root: Root,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, Copy)]
enum Root {
    /// The element a comprehension is at.
    Elem,
    Caller,
    Operation,
    Resource,
    Method,
    Path,
    Body,
    Lease,
    Tool,
    Headers,
}

#[derive(Debug)]
enum Step {
    Field(String),
    Key(String),
    At(i64),
}

/// A value as read from the facts, borrowed.
#[derive(Debug, Clone, Copy)]
enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(&'a str),
    Json(&'a Value),
    Headers,
    Lease,
    Tool,
}

impl Fast {
    /// The expression's value on `facts` when it is certain; `None`: ask CEL.
    pub fn eval(&self, f: &Facts<'_>) -> Option<bool> {
        self.at(f, None)
    }

    fn at<'a>(&'a self, f: &Facts<'a>, elem: Option<V<'a>>) -> Option<bool> {
        let value = |o: &'a Operand| value(o, f, elem);
        let read = |p: &'a Path| p.read(f, elem);
        match self {
            Fast::Const(b) => Some(*b),
            // CEL's `&&` and `||` are commutative over errors: `false && error` and
            // `error && false` are both false. So a side this cannot judge only matters when
            // the other side does not decide alone.
            Fast::And(a, b) => match a.at(f, elem) {
                Some(false) => Some(false),
                left => match (left, b.at(f, elem)?) {
                    (_, false) => Some(false),
                    (Some(true), true) => Some(true),
                    _ => None,
                },
            },
            Fast::Or(a, b) => match a.at(f, elem) {
                Some(true) => Some(true),
                left => match (left, b.at(f, elem)?) {
                    (_, true) => Some(true),
                    (Some(false), false) => Some(false),
                    _ => None,
                },
            },
            Fast::Not(a) => a.at(f, elem).map(|b| !b),
            Fast::Cmp(c, a, b) => compare(*c, value(a)?, value(b)?),
            Fast::Has(p, field) => match read(p)? {
                V::Json(Value::Object(o)) => Some(o.contains_key(field)),
                _ => None,
            },
            Fast::In(needle, hay) => {
                let needle = value(needle)?;
                match hay {
                    Operand::List(items) => {
                        let mut any = false;
                        for item in items {
                            any |= equal(needle, lit(item))?;
                        }
                        Some(any)
                    }
                    _ => match (needle, value(hay)?) {
                        (V::Str(k), V::Json(Value::Object(o))) => Some(o.contains_key(k)),
                        (V::Str(k), V::Headers) => {
                            Some(f.headers.iter().any(|(name, _)| lower_is(name, k)))
                        }
                        _ => None,
                    },
                }
            }
            Fast::Bool(p) => match read(p)? {
                V::Bool(b) => Some(b),
                _ => None,
            },
            Fast::Str(which, t, a) => match (value(t)?, value(a)?) {
                (V::Str(t), V::Str(a)) => Some(match which {
                    StrFn::StartsWith => t.starts_with(a),
                    StrFn::EndsWith => t.ends_with(a),
                    StrFn::Contains => t.contains(a),
                }),
                _ => None,
            },
            // As `||` (exists) or `&&` (all) over the elements: one element that decides
            // decides, whatever the others are; otherwise every element must be known.
            Fast::Each { all, range, pred } => {
                let V::Json(Value::Array(items)) = read(range)? else {
                    return None;
                };
                let mut unknown = false;
                for item in items {
                    match pred.at(f, Some(json(item))) {
                        Some(b) if b != *all => return Some(b),
                        Some(_) => {}
                        None => unknown = true,
                    }
                }
                (!unknown).then_some(*all)
            }
        }
    }
}

impl Path {
    fn read<'a>(&self, f: &Facts<'a>, elem: Option<V<'a>>) -> Option<V<'a>> {
        let mut v = match self.root {
            Root::Elem => elem?,
            Root::Caller => V::Str(f.caller.unwrap_or("")),
            Root::Operation => V::Str(f.operation),
            Root::Resource => V::Str(f.resource),
            Root::Method => V::Str(f.method),
            Root::Path => V::Str(f.path),
            Root::Body => f.body.map_or(V::Null, json),
            Root::Lease => f.lease.map_or(V::Null, |_| V::Lease),
            Root::Tool => f.tool.map_or(V::Null, |_| V::Tool),
            Root::Headers => V::Headers,
        };
        for step in &self.steps {
            v = match (v, step) {
                (V::Json(Value::Object(o)), Step::Field(k) | Step::Key(k)) => json(o.get(k)?),
                (V::Json(Value::Array(a)), Step::At(i)) => json(a.get(usize::try_from(*i).ok()?)?),
                (V::Headers, Step::Field(k) | Step::Key(k)) => V::Str(
                    f.headers
                        .iter()
                        .find(|(name, _)| lower_is(name, k))
                        .map(|(_, value)| *value)?,
                ),
                (V::Lease, Step::Field(k)) => {
                    let l = f.lease.as_ref()?;
                    match k.as_str() {
                        "recovery_mode" => V::Str(l.recovery_mode),
                        "t_granted_ms" => V::Int(i64::try_from(l.t_granted_ms).ok()?),
                        "agent_id" => l.agent_id.map_or(V::Null, V::Str),
                        "issuer" => l.issuer.map_or(V::Null, V::Str),
                        _ => return None,
                    }
                }
                (V::Tool, Step::Field(k)) => {
                    let t = f.tool.as_ref()?;
                    match k.as_str() {
                        "name" => V::Str(t.name),
                        // An absent `annotations` is an empty map to CEL: a member of it is
                        // an error, which is CEL's to report.
                        "annotations" => V::Json(t.annotations?),
                        _ => return None,
                    }
                }
                _ => return None,
            };
        }
        Some(v)
    }
}

/// A JSON value as the facts give it to CEL: integers that fit as `int`, else `uint`, else
/// `double`.
fn json(v: &Value) -> V<'_> {
    match v {
        Value::Null => V::Null,
        Value::Bool(b) => V::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => V::Int(i),
            (None, Some(u), _) => V::UInt(u),
            (None, None, Some(d)) => V::Double(d),
            _ => V::Json(v),
        },
        Value::String(s) => V::Str(s),
        _ => V::Json(v),
    }
}

fn value<'a>(o: &'a Operand, f: &Facts<'a>, elem: Option<V<'a>>) -> Option<V<'a>> {
    match o {
        Operand::Lit(l) => Some(lit(l)),
        Operand::Path(p) => p.read(f, elem),
        Operand::List(_) => None,
    }
}

fn lit(l: &Lit) -> V<'_> {
    match l {
        Lit::Null => V::Null,
        Lit::Bool(b) => V::Bool(*b),
        Lit::Int(i) => V::Int(*i),
        Lit::UInt(u) => V::UInt(*u),
        Lit::Double(d) => V::Double(*d),
        Lit::Str(s) => V::Str(s),
    }
}

/// Equality of two values of one type; `None` across types (CEL's rules for those are its).
fn equal(a: V<'_>, b: V<'_>) -> Option<bool> {
    Some(match (a, b) {
        (V::Null, V::Null) => true,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Int(x), V::Int(y)) => x == y,
        (V::UInt(x), V::UInt(y)) => x == y,
        (V::Double(x), V::Double(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        _ => return None,
    })
}

fn compare(c: Cmp, a: V<'_>, b: V<'_>) -> Option<bool> {
    use std::cmp::Ordering;
    let ord: Ordering = match c {
        Cmp::Eq => return equal(a, b),
        Cmp::Ne => return equal(a, b).map(|e| !e),
        _ => match (a, b) {
            (V::Int(x), V::Int(y)) => x.cmp(&y),
            (V::UInt(x), V::UInt(y)) => x.cmp(&y),
            (V::Double(x), V::Double(y)) => x.partial_cmp(&y)?,
            (V::Str(x), V::Str(y)) => x.cmp(y),
            _ => return None,
        },
    };
    Some(match c {
        Cmp::Lt => ord.is_lt(),
        Cmp::Le => ord.is_le(),
        Cmp::Gt => ord.is_gt(),
        Cmp::Ge => ord.is_ge(),
        Cmp::Eq | Cmp::Ne => return None,
    })
}

/// Whether a header's name, lower-cased as the rules see it, is `k`.
fn lower_is(name: &str, k: &str) -> bool {
    name.len() == k.len()
        && name
            .bytes()
            .zip(k.bytes())
            .all(|(a, b)| a.to_ascii_lowercase() == b)
}
