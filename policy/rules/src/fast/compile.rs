//! A `when` compiled into [`Fast`] from CEL's syntax tree: the shapes it models, and `None`
//! for anything else (CEL judges those).

use cel::common::ast::{operators as op, Expr, IdedExpr, LiteralValue};

use super::{Cmp, Fast, Lit, Operand, Path, Root, Step, StrFn};

impl Fast {
    /// The expression in this shape, or `None` (CEL judges it).
    pub fn of(e: &IdedExpr) -> Option<Fast> {
        Fast::within(e, None)
    }

    /// [`Fast::of`] inside a comprehension whose element is named `bound`.
    fn within(e: &IdedExpr, bound: Option<&str>) -> Option<Fast> {
        let of = |x: &IdedExpr| Fast::within(x, bound).map(Box::new);
        let operand = |x: &IdedExpr| operand(x, bound);
        let path = |x: &IdedExpr| path(x, bound);
        Some(match &e.expr {
            Expr::Literal(LiteralValue::Boolean(b)) => Fast::Const(*b.inner()),
            Expr::Select(s) if s.test => Fast::Has(path(&s.operand)?, s.field.clone()),
            Expr::Call(c) => match (c.func_name.as_str(), &c.target, c.args.as_slice()) {
                (op::LOGICAL_AND, None, [a, b]) => Fast::And(of(a)?, of(b)?),
                (op::LOGICAL_OR, None, [a, b]) => Fast::Or(of(a)?, of(b)?),
                (op::LOGICAL_NOT, None, [a]) => Fast::Not(of(a)?),
                (op::IN, None, [a, b]) => Fast::In(operand(a)?, operand(b)?),
                (op::INDEX, None, [_, _]) => Fast::Bool(path(e)?),
                (f, None, [a, b]) => {
                    let cmp = match f {
                        op::EQUALS => Cmp::Eq,
                        op::NOT_EQUALS => Cmp::Ne,
                        op::LESS => Cmp::Lt,
                        op::LESS_EQUALS => Cmp::Le,
                        op::GREATER => Cmp::Gt,
                        op::GREATER_EQUALS => Cmp::Ge,
                        _ => return None,
                    };
                    Fast::Cmp(cmp, operand(a)?, operand(b)?)
                }
                (f, Some(t), [a]) => {
                    let which = match f {
                        "startsWith" => StrFn::StartsWith,
                        "endsWith" => StrFn::EndsWith,
                        "contains" => StrFn::Contains,
                        _ => return None,
                    };
                    Fast::Str(which, operand(t)?, operand(a)?)
                }
                _ => return None,
            },
            Expr::Ident(_) | Expr::Select(_) => Fast::Bool(path(e)?),
            Expr::Comprehension(c) if bound.is_none() && c.iter_var2.is_none() => each(c)
                .and_then(|(all, pred)| {
                    Some(Fast::Each {
                        all,
                        range: path(&c.iter_range)?,
                        pred: Box::new(Fast::within(pred, Some(&c.iter_var))?),
                    })
                })?,
            _ => return None,
        })
    }
}

/// A comprehension that is `exists` or `all` as CEL's macros expand them: whether it is
/// `all`, and its predicate.
fn each(c: &cel::common::ast::ComprehensionExpr) -> Option<(bool, &IdedExpr)> {
    let init = match &c.accu_init.expr {
        Expr::Literal(LiteralValue::Boolean(b)) => *b.inner(),
        _ => return None,
    };
    let Expr::Ident(result) = &c.result.expr else {
        return None;
    };
    let Expr::Call(step) = &c.loop_step.expr else {
        return None;
    };
    let want = if init {
        op::LOGICAL_AND
    } else {
        op::LOGICAL_OR
    };
    match (step.func_name.as_str(), step.args.as_slice()) {
        (f, [accu, pred]) if f == want && *result == c.accu_var => match &accu.expr {
            Expr::Ident(a) if *a == c.accu_var && !mentions(pred, &c.accu_var) => {
                Some((init, pred))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether `name` appears as an identifier anywhere in `e`.
fn mentions(e: &IdedExpr, name: &str) -> bool {
    match &e.expr {
        Expr::Ident(n) => n == name,
        Expr::Select(s) => mentions(&s.operand, name),
        Expr::Call(c) => {
            c.target.as_ref().is_some_and(|t| mentions(t, name))
                || c.args.iter().any(|a| mentions(a, name))
        }
        Expr::List(l) => l.elements.iter().any(|x| mentions(x, name)),
        Expr::Literal(_) => false,
        // Anything else is not a shape judged here.
        _ => true,
    }
}

fn operand(e: &IdedExpr, bound: Option<&str>) -> Option<Operand> {
    match &e.expr {
        Expr::Literal(l) => Some(Operand::Lit(literal(l)?)),
        Expr::List(l) => Some(Operand::List(
            l.elements
                .iter()
                .map(|x| match &x.expr {
                    Expr::Literal(l) => literal(l),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?,
        )),
        _ => Some(Operand::Path(path(e, bound)?)),
    }
}

fn literal(l: &LiteralValue) -> Option<Lit> {
    Some(match l {
        LiteralValue::Null => Lit::Null,
        LiteralValue::Boolean(b) => Lit::Bool(*b.inner()),
        LiteralValue::Int(i) => Lit::Int(*i.inner()),
        LiteralValue::UInt(u) => Lit::UInt(*u.inner()),
        LiteralValue::Double(d) => Lit::Double(*d.inner()),
        LiteralValue::String(s) => Lit::Str(s.inner().to_owned()),
        LiteralValue::Bytes(_) => return None,
    })
}

/// `body.a.b`, `headers["x"]`, `body.lines[0]`: a variable and what is read from it.
fn path(e: &IdedExpr, bound: Option<&str>) -> Option<Path> {
    match &e.expr {
        Expr::Ident(name) => Some(Path {
            root: match name.as_str() {
                n if Some(n) == bound => Root::Elem,
                "caller" => Root::Caller,
                "operation" => Root::Operation,
                "resource" => Root::Resource,
                "method" => Root::Method,
                "path" => Root::Path,
                "body" => Root::Body,
                "lease" => Root::Lease,
                "tool" => Root::Tool,
                "headers" => Root::Headers,
                // `query` and `now`, and a comprehension's own variables: CEL's.
                _ => return None,
            },
            steps: Vec::new(),
        }),
        Expr::Select(s) if !s.test => {
            let mut p = path(&s.operand, bound)?;
            p.steps.push(Step::Field(s.field.clone()));
            Some(p)
        }
        Expr::Call(c) if c.func_name == op::INDEX && c.target.is_none() => {
            let [on, at] = c.args.as_slice() else {
                return None;
            };
            let mut p = path(on, bound)?;
            p.steps.push(match &at.expr {
                Expr::Literal(LiteralValue::String(k)) => Step::Key(k.inner().to_owned()),
                Expr::Literal(LiteralValue::Int(i)) => Step::At(*i.inner()),
                _ => return None,
            });
            Some(p)
        }
        _ => None,
    }
}
