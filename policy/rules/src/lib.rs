//! Operator rules (SPEC §15): what the operator decides about writes that are well-formed.
//!
//! A `rules.toml` is an ordered list of rules, each scoped to operations (`on`, the budgets'
//! key form: `POST /api/v2/orders`, `mcp:tool/create_order`) and conditioned by a CEL
//! expression (`when`). The first rule in force (`mode = "enforce"`) that matches decides:
//! `hold` (an escrow, whatever the lease asked), `deny` (403 `ERR_POLICY_DENIED`) or `allow`
//! (an exception listed before a broader rule). A rule in `mode = "report"` that matches
//! decides nothing: what it would have done is recorded, and the rules after it still run.
//!
//! Everything here is pure: [`RuleSet::load`] parses, compiles and vets a file (a file with
//! any problem is refused whole, so a bad file never replaces a good one), and
//! [`RuleSet::decide`] judges one write's [`Facts`] without I/O. Evaluation is fail-closed:
//! a `when` that fails while evaluating (a missing member, a wrong type, a result that is not
//! a boolean) counts as matched for `deny` and `hold` and as not matched for `allow`, and is
//! reported in [`Decision::failed`].
//!
//! What bounds an evaluation's cost: the expression's length and nesting (checked at load),
//! at most one comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) on any path
//! from the root (so a rule is linear in the body it reads, never quadratic), and the body
//! itself, whose size and depth the sidecar bounds before any rule sees it.

mod expr;
mod facts;
mod fast;
mod file;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use palisade_core::Sha256Digest;

pub use facts::{Facts, LeaseFacts, ToolFacts};

thread_local! {
    /// CEL's standard library, made once per thread: making it is most of a context's cost.
    static ROOT: cel::Context<'static, 'static> = cel::Context::default();
}

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Hold,
    Deny,
    Allow,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Hold => "hold",
            Action::Deny => "deny",
            Action::Allow => "allow",
        }
    }

    /// Fail-closed: an expression that cannot be evaluated matches a rule that stops or
    /// holds a write, and never one that lets it through.
    fn on_failure(self) -> bool {
        !matches!(self, Action::Allow)
    }
}

/// Whether a rule acts, or only records what it would have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Enforce,
    Report,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Report => "report",
        }
    }
}

/// One rule, compiled.
#[derive(Debug)]
pub struct Rule {
    /// Unique in its file; goes into receipts, events and metric labels (so it is limited to
    /// `[A-Za-z0-9._-]`, at most 64 characters).
    pub name: String,
    /// The operations it applies to; `None`: every write.
    pub on: Option<Vec<String>>,
    when: Option<expr::Condition>,
    /// `when` as written, for the operators' console.
    pub when_source: Option<String>,
    pub action: Action,
    /// `hold`: distinct approvers needed (`None`: `escrow.approvals_required`).
    pub approvals: Option<u32>,
    /// `hold`: how long a held write may wait for its decision, in milliseconds.
    pub expires_ms: Option<u64>,
    pub mode: Mode,
    pub reason: Option<String>,
}

impl Rule {
    /// Whether the rule applies to a write of `operation` (or of `also`, the agent-facing
    /// name of a connected operation).
    fn applies(&self, operation: &str, also: Option<&str>) -> bool {
        match &self.on {
            None => true,
            Some(ops) => ops
                .iter()
                .any(|o| o == operation || Some(o.as_str()) == also),
        }
    }
}

/// A loaded rules file: its rules in order and the SHA-256 of its bytes (`rules_digest`).
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    digest: Sha256Digest,
    /// `digest` as receipts spell it, made once: every write's receipts carry it.
    digest_text: String,
    /// The variables any rule reads: the only facts made into CEL values.
    uses: u16,
    /// What any rule reads of the body.
    body: expr::BodyUse,
}

/// A rule that matched.
#[derive(Debug, Clone)]
pub struct Matched {
    pub rule: Arc<str>,
    pub action: Action,
    pub mode: Mode,
    /// Its `approvals` and `expires` (for a hold), its `reason`.
    pub approvals: Option<u32>,
    pub expires_ms: Option<u64>,
    pub reason: Option<String>,
    /// Matched because its expression failed (fail-closed), not because it held.
    pub failed: bool,
}

/// What the rules decided about one write.
#[derive(Debug, Default)]
pub struct Decision {
    /// The rule in force that decided (`None`: no rule in force matched; the write goes on).
    pub decided: Option<Matched>,
    /// Rules in report mode that matched before it, in order: what each would have done.
    pub reported: Vec<Matched>,
    /// Rules whose expression failed while evaluating (each is also in `decided` or
    /// `reported` when the failure made it match).
    pub failed: Vec<(Arc<str>, String)>,
}

impl RuleSet {
    /// Parses, compiles and vets a rules file. Every problem is named (`rule[2].when: …`);
    /// any problem refuses the whole file.
    pub fn load(bytes: &[u8]) -> Result<RuleSet, Vec<String>> {
        let rules = file::parse(bytes)?;
        let conditions = || rules.iter().filter_map(|r| r.when.as_ref());
        let uses = conditions().fold(0, |m, c| m | c.uses);
        let mut body = expr::BodyUse::default();
        for c in conditions() {
            body.join(&c.body);
        }
        let digest = Sha256Digest::of(bytes);
        Ok(RuleSet {
            rules,
            digest_text: digest.to_string(),
            digest,
            uses,
            body,
        })
    }

    /// SHA-256 of the file's bytes: `rules_digest` in every receipt.
    pub fn digest(&self) -> &Sha256Digest {
        &self.digest
    }

    /// [`RuleSet::digest`] as text (`sha256:` and 64 hex digits).
    pub fn digest_text(&self) -> &str {
        &self.digest_text
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rules on one write, in order: report-mode rules record and go on, the first rule
    /// in force that matches decides.
    pub fn decide(&self, facts: &Facts<'_>) -> Decision {
        // With nothing unknown, no rule stops the decision for want of a variable.
        ROOT.with(|root| self.decide_in(root, facts, 0))
            .unwrap_or_default()
    }

    /// [`RuleSet::decide`] for a write of which the variables named in `unknown` are not
    /// known (a write read back from its receipt has no `body`, `query`, `headers` or
    /// `lease`): the first rule in force that applies and reads one of them ends the
    /// decision, since it might have matched: `Err(its name)`. A rule in report mode that
    /// reads one is passed over.
    pub fn decide_knowing(
        &self,
        facts: &Facts<'_>,
        unknown: &[&str],
    ) -> Result<Decision, Arc<str>> {
        let mask = expr::VARIABLES
            .iter()
            .enumerate()
            .filter(|(_, v)| unknown.contains(v))
            .fold(0u16, |m, (i, _)| m | (1 << i));
        ROOT.with(|root| self.decide_in(root, facts, mask))
    }

    fn decide_in(
        &self,
        root: &cel::Context<'static, 'static>,
        facts: &Facts<'_>,
        unknown: u16,
    ) -> Result<Decision, Arc<str>> {
        let mut decision = Decision::default();
        let mut context = None;
        for rule in &self.rules {
            if !rule.applies(facts.operation, facts.also) {
                continue;
            }
            let (matched, failed) = match &rule.when {
                None => (true, false),
                // A rule in report mode decides nothing: what it would say is not reported.
                Some(cond) if cond.uses & unknown != 0 => match rule.mode {
                    Mode::Report => continue,
                    Mode::Enforce => return Err(rule.name.as_str().into()),
                },
                // The common shapes are judged on the facts as they are, when that is certain;
                // CEL judges the rest, on the facts made into its values once, for the first
                // rule that needs them.
                Some(cond) => match cond.fast.as_ref().and_then(|f| f.eval(facts)) {
                    Some(b) => (b, false),
                    None => {
                        let cx = context
                            .get_or_insert_with(|| facts.context(root, self.uses, &self.body));
                        match cond.holds(cx) {
                            Ok(holds) => (holds, false),
                            Err(why) => {
                                decision.failed.push((rule.name.as_str().into(), why));
                                (rule.action.on_failure(), true)
                            }
                        }
                    }
                },
            };
            if !matched {
                continue;
            }
            let m = Matched {
                rule: rule.name.as_str().into(),
                action: rule.action,
                mode: rule.mode,
                approvals: rule.approvals,
                expires_ms: rule.expires_ms,
                reason: rule.reason.clone(),
                failed,
            };
            match rule.mode {
                Mode::Report => decision.reported.push(m),
                Mode::Enforce => {
                    decision.decided = Some(m);
                    break;
                }
            }
        }
        Ok(decision)
    }
}
