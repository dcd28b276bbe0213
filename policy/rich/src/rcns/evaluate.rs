//! The four-lock dispatcher gate (seed 000 §3.1) and the synthesis evaluation (§3.6), in
//! the seed's order. Each refusal carries the seed's status and, where it reserves one, its
//! reason word.
//!
//! The gate's locks 1–3 (operator enabled, `Allow-RCNS` on the request, `rcns:negotiate`
//! both granted and claimed) are checked before the body is read; lock 4 (the caller's trust
//! tier against the recipe's) needs the recipe, so it is checked as soon as one matches,
//! before authority. The order of the evaluation is then:
//!
//! 1. method in the catalog (the recipes' methods and the set's `methods`) — 459;
//! 2. path grammar — 460;
//! 3. semantic block — 400;
//! 4. schemas are JSON Schema (2020-12, within the bundle's limits) — 400;
//! 5. authority: every scope of the recipe and of its steps granted (else 455
//!    `scope-exceeded`) and claimed (else 262 `scope-required`) — before anything runs;
//! 6. a recipe composes the pair — else 463 `composition-impossible`;
//! 7. policy: a pair a bound operation already serves, or a reserved path, is not
//!    negotiated — 463 `policy-refused`.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::callers::Caller;
use super::proposal::Proposal;
use super::scopes::SCOPE_NEGOTIATE;
use crate::recipes::{Recipe, RecipeSet};
use crate::{Bundle, Schema};
use palisade_policy::{ErrorCode, Refusal};

/// The gate's answer when a lock is closed: which one (1–4), and the refusal.
#[derive(Debug, Clone)]
pub struct Gate {
    pub lock: u8,
    pub refusal: Refusal,
}

/// Locks 1–3 of the gate.
pub fn gate(
    enabled: bool,
    allow_rcns: bool,
    caller: Option<&Caller>,
    claim: &BTreeSet<String>,
) -> Result<(), Gate> {
    let closed = |lock: u8, detail: &'static str| Gate {
        lock,
        refusal: Refusal::new(ErrorCode::RcnsRefused, detail).with_reason("rcns-disabled"),
    };
    if !enabled {
        return Err(closed(1, "contract negotiation is disabled on this server"));
    }
    if !allow_rcns {
        return Err(closed(2, "the request does not carry Allow-RCNS: true"));
    }
    let granted = caller.is_some_and(|c| c.scopes.contains(SCOPE_NEGOTIATE));
    if !granted || !claim.contains(SCOPE_NEGOTIATE) {
        return Err(closed(
            3,
            "the caller's Authority-Scope does not hold rcns:negotiate",
        ));
    }
    Ok(())
}

/// Lock 4: the caller's trust tier against the recipe's.
pub fn trust(caller: &Caller, recipe: &Recipe) -> Result<(), Gate> {
    if caller.trust_tier <= recipe.trust_tier {
        return Ok(());
    }
    Err(Gate {
        lock: 4,
        refusal: Refusal::new(
            ErrorCode::RcnsRefused,
            "the caller's trust tier is below the recipe's minimum",
        )
        .with_reason("trust-tier-insufficient"),
    })
}

/// What an accepted proposal is synthesized from.
#[derive(Debug, Clone)]
pub struct Matched {
    pub recipe: Arc<Recipe>,
}

/// Why a proposal was refused: the refusal, plus what the answer may add.
#[derive(Debug, Clone)]
pub enum Refused {
    Gate(Gate),
    /// Steps 1–4, and 7.
    Plain(Refusal),
    /// Step 5: the scopes at issue (names the operator chose, never request values).
    Scopes(Refusal, Vec<String>),
    /// Step 6: no recipe composes the pair.
    Impossible(Refusal),
}

impl Refused {
    pub fn refusal(&self) -> &Refusal {
        match self {
            Self::Gate(g) => &g.refusal,
            Self::Plain(r) | Self::Scopes(r, _) | Self::Impossible(r) => r,
        }
    }
}

/// Steps 1–7 of seed 000 §3.6, with lock 4, for a caller that passed locks 1–3.
pub fn evaluate(
    p: &Proposal,
    caller: &Caller,
    claim: &BTreeSet<String>,
    recipes: Option<&RecipeSet>,
    bundle: Option<&Bundle>,
) -> Result<Matched, Refused> {
    let at = p.endpoint_pointer();
    let empty = RecipeSet::default();
    let recipes = recipes.unwrap_or(&empty);
    if !crate::recipes::is_method(&p.method) || !recipes.methods.contains(&p.method) {
        return Err(Refused::Plain(
            Refusal::new(
                ErrorCode::RcnsMethod,
                "the method is neither in the method catalog nor declared by this server",
            )
            .with_location(format!("{at}/method")),
        ));
    }
    if !crate::recipes::is_path(&p.path) {
        return Err(Refused::Plain(
            Refusal::new(
                ErrorCode::RcnsPath,
                "the path does not satisfy the path grammar: /-separated segments of A-Z a-z 0-9 . _ ~ - or {name}, at most 256 bytes",
            )
            .with_location(format!("{at}/path")),
        ));
    }
    let semantic = match &p.semantic {
        None => Some("the endpoint needs a semantic block"),
        Some(s) => crate::recipes::semantic_problem(s),
    };
    if let Some(why) = semantic {
        return Err(Refused::Plain(
            Refusal::new(ErrorCode::RcnsProposal, why)
                .with_reason("semantic-invalid")
                .with_location(format!("{at}/semantic")),
        ));
    }
    for (key, schema) in [
        ("input_schema", &p.input_schema),
        ("output_schema", &p.output_schema),
    ] {
        if let Some(s) = schema {
            if Schema::compile(s, "").is_err() {
                return Err(Refused::Plain(
                    Refusal::new(
                        ErrorCode::RcnsProposal,
                        "not a JSON Schema (2020-12) within the server's limits",
                    )
                    .with_reason("schema-invalid")
                    .with_location(format!("{at}/{key}")),
                ));
            }
        }
    }
    let recipe = recipes.find(&p.method, &p.path);
    if let Some(recipe) = recipe {
        trust(caller, recipe).map_err(Refused::Gate)?;
        let ungranted: Vec<String> = recipe
            .all_scopes
            .difference(&caller.scopes)
            .cloned()
            .collect();
        if !ungranted.is_empty() {
            return Err(Refused::Scopes(
                Refusal::new(
                    ErrorCode::RcnsScopeExceeded,
                    "the composition needs authority the caller's identity document does not grant",
                )
                .with_reason("scope-exceeded"),
                ungranted,
            ));
        }
        let unclaimed: Vec<String> = recipe.all_scopes.difference(claim).cloned().collect();
        if !unclaimed.is_empty() {
            return Err(Refused::Scopes(
                Refusal::new(
                    ErrorCode::RcnsScopeRequired,
                    "the composition needs scopes the request's Authority-Scope does not claim",
                )
                .with_reason("scope-required"),
                unclaimed,
            ));
        }
    }
    let Some(recipe) = recipe else {
        return Err(Refused::Impossible(
            Refusal::new(
                ErrorCode::RcnsRejected,
                "no recipe composes this method and path from the bound capabilities",
            )
            .with_reason("composition-impossible"),
        ));
    };
    let reserved = p.path.starts_with("/.well-known/");
    let served = bundle.is_some_and(|b| b.route(&p.method, &p.path).is_some());
    if reserved || served {
        return Err(Refused::Plain(
            Refusal::new(
                ErrorCode::RcnsRejected,
                if reserved {
                    "the path is reserved to the server"
                } else {
                    "a bound operation already serves this method and path; it is not renegotiated"
                },
            )
            .with_reason("policy-refused"),
        ));
    }
    Ok(Matched {
        recipe: recipe.clone(),
    })
}
