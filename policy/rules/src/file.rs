//! `rules.toml` as written: an array of `[[rule]]` tables, checked field by field. Unknown
//! fields are refused (a misspelt `when` must not turn a rule into one that matches every
//! write).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;

use crate::expr::Condition;
use crate::{Action, Mode, Rule};

/// Most rules one file may hold: each is evaluated on every write it applies to.
pub const MAX_RULES: usize = 256;
/// Longest `on` list of one rule.
const MAX_ON: usize = 256;
/// Most distinct approvers a rule may ask for.
const MAX_APPROVALS: u32 = 16;
/// Longest time a rule may hold a write: a held write keeps its resource's place (SPEC §5.4).
const MAX_EXPIRES: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    on: Option<Vec<String>>,
    when: Option<toml::Spanned<String>>,
    action: Option<String>,
    approvals: Option<i64>,
    expires: Option<String>,
    mode: Option<String>,
    reason: Option<String>,
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Rule>, Vec<String>> {
    let text = std::str::from_utf8(bytes).map_err(|_| vec!["the file is not UTF-8".to_owned()])?;
    let place = |span: std::ops::Range<usize>, at: (usize, usize)| place_of(text, span, at);
    let raw: RawFile = toml::from_str(text).map_err(|e| vec![format!("not a rules file: {e}")])?;
    let mut problems = Vec::new();
    if raw.rule.len() > MAX_RULES {
        problems.push(format!("{} rules; at most {MAX_RULES}", raw.rule.len()));
    }
    let mut names = BTreeSet::new();
    let mut rules = Vec::with_capacity(raw.rule.len());
    for (i, r) in raw.rule.into_iter().enumerate() {
        let at = format!("rule[{i}]");
        if let Some(rule) = one(&at, r, &mut problems, &place) {
            if !names.insert(rule.name.clone()) {
                problems.push(format!("{at}.name: \"{}\" is used twice", rule.name));
            }
            rules.push(rule);
        }
    }
    if problems.is_empty() {
        Ok(rules)
    } else {
        Err(problems)
    }
}

fn one(
    at: &str,
    r: RawRule,
    problems: &mut Vec<String>,
    place: &dyn Fn(std::ops::Range<usize>, (usize, usize)) -> String,
) -> Option<Rule> {
    let before = problems.len();
    let name = match r.name {
        Some(n) if valid_name(&n) => n,
        Some(n) => {
            problems.push(format!(
                "{at}.name: \"{}\" must be 1 to 64 of A-Z a-z 0-9 . _ -",
                n.escape_debug()
            ));
            String::new()
        }
        None => {
            problems.push(format!("{at}.name: required"));
            String::new()
        }
    };
    let action = match r.action.as_deref() {
        Some("hold") => Action::Hold,
        Some("deny") => Action::Deny,
        Some("allow") => Action::Allow,
        Some(other) => {
            problems.push(format!(
                "{at}.action: \"{}\" is not hold, deny or allow",
                other.escape_debug()
            ));
            Action::Deny
        }
        None => {
            problems.push(format!("{at}.action: required (hold, deny or allow)"));
            Action::Deny
        }
    };
    let mode = match r.mode.as_deref() {
        None | Some("enforce") => Mode::Enforce,
        Some("report") => Mode::Report,
        Some(other) => {
            problems.push(format!(
                "{at}.mode: \"{}\" is not enforce or report",
                other.escape_debug()
            ));
            Mode::Enforce
        }
    };
    let on = match r.on {
        None => None,
        Some(ops) if ops.is_empty() => {
            // An empty list would read as "no operation" to some and "every one" to others.
            problems.push(format!("{at}.on: empty; leave it out to mean every write"));
            None
        }
        Some(ops) if ops.len() > MAX_ON => {
            problems.push(format!(
                "{at}.on: {} operations; at most {MAX_ON}",
                ops.len()
            ));
            None
        }
        Some(ops) => {
            for (j, o) in ops.iter().enumerate() {
                if let Err(why) = valid_operation(o) {
                    problems.push(format!("{at}.on[{j}]: {why}"));
                }
            }
            Some(ops)
        }
    };
    let when_source = r.when.as_ref().map(|w| w.get_ref().clone());
    let when = match r.when {
        None => None,
        Some(src) => match Condition::compile(src.get_ref()) {
            Ok(c) => Some(c),
            Err(refused) => {
                let at_file = place(src.span(), refused.at.unwrap_or((1, 1)));
                problems.push(format!("{at}.when ({at_file}): {}", refused.why));
                None
            }
        },
    };
    let holds = action == Action::Hold;
    let approvals = match r.approvals {
        None => None,
        Some(_) if !holds => {
            problems.push(format!("{at}.approvals: only a hold asks for approvals"));
            None
        }
        Some(n) if (1..=i64::from(MAX_APPROVALS)).contains(&n) => u32::try_from(n).ok(),
        Some(n) => {
            problems.push(format!("{at}.approvals: {n}; 1 to {MAX_APPROVALS}"));
            None
        }
    };
    let expires_ms = match r.expires {
        None => None,
        Some(_) if !holds => {
            problems.push(format!("{at}.expires: only a hold expires"));
            None
        }
        Some(s) => match humantime::parse_duration(&s) {
            Ok(d) if !d.is_zero() && d <= MAX_EXPIRES => u64::try_from(d.as_millis()).ok(),
            Ok(_) => {
                problems.push(format!(
                    "{at}.expires: \"{}\" must be more than 0 and at most 30 days",
                    s.escape_debug()
                ));
                None
            }
            Err(e) => {
                problems.push(format!("{at}.expires: \"{}\": {e}", s.escape_debug()));
                None
            }
        },
    };
    let reason = match r.reason {
        Some(s) if s.chars().count() > 200 || s.chars().any(char::is_control) => {
            problems.push(format!(
                "{at}.reason: at most 200 characters, no control characters"
            ));
            None
        }
        other => other,
    };
    (problems.len() == before).then_some(Rule {
        name,
        on,
        when,
        when_source,
        action,
        approvals,
        expires_ms,
        mode,
        reason,
    })
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// An operation in the budgets' key form: `METHOD /path-template` or `mcp:tool/NAME`.
fn valid_operation(o: &str) -> Result<(), String> {
    if let Some(tool) = o.strip_prefix("mcp:tool/") {
        return if tool.is_empty() || tool.chars().any(char::is_whitespace) {
            Err(format!(
                "\"{}\": a tool name after mcp:tool/",
                o.escape_debug()
            ))
        } else {
            Ok(())
        };
    }
    match o.split_once(' ') {
        Some((method, path))
            if !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_uppercase())
                && path.starts_with('/')
                && !path.contains(' ') =>
        {
            Ok(())
        }
        _ => Err(format!(
            "\"{}\": not an operation (\"POST /api/v2/orders\" or \"mcp:tool/create_order\")",
            o.escape_debug()
        )),
    }
}

/// `line L, column C` in the file of a position inside a `when` string: `span` is the string
/// as written (its quotes included), `at` the 1-based line and column in the expression.
fn place_of(text: &str, span: std::ops::Range<usize>, at: (usize, usize)) -> String {
    let written = text.get(span.clone()).unwrap_or("");
    // After the opening quote(s); a multi-line string's first newline is not part of it.
    let mut open = if written.starts_with("\"\"\"") || written.starts_with("\'\'\'") {
        3
    } else {
        1
    };
    if open == 3 && written.get(open..).is_some_and(|w| w.starts_with('\n')) {
        open += 1;
    }
    let start = span.start + open;
    let before = text.get(..start).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    let (el, ec) = at;
    if el <= 1 {
        format!("line {line}, column {}", col + ec - 1)
    } else {
        format!("line {}, column {ec}", line + el - 1)
    }
}
