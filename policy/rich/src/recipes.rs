//! The recipe set (seed 000 §3.5, §4.1): operator-authored compositions of bound
//! capabilities. It is a bundle file like a contract — named by the SHA-256 of its JCS form,
//! pinned from the lockfile (`"rcns": {"recipesDigest": "sha-256:…"}`) — so it is compiled,
//! checked and hot-swapped with the bundle, never apart from it.
//!
//! ```json
//! {"capabilityScopes": {"items.put": ["erp:items:write"]},
//!  "methods": ["RESERVE"],
//!  "recipes": [{"name": "reserve-stock", "version": "1", "method": "RESERVE",
//!               "path_exact": "/stock-reservations", "description": "…",
//!               "required_scopes": ["erp:stock:reserve"], "trust_tier": 2,
//!               "semantic": {"intent": "…"},
//!               "input_schema": {…}, "output_schema": {…},
//!               "steps": [{"capability": "items.put", "path": {"id": "input.sku"},
//!                          "body": "{name: input.name}"}],
//!               "output": "{item: steps[0]}"}]}
//! ```
//!
//! - A step names a capability by its lockfile key; the Authority-Scope a step needs is the
//!   operator's `capabilityScopes` entry for that capability, never the recipe's word, so a
//!   recipe cannot under-declare what its steps do. Every step capability must have one.
//! - Step requests are built by T1 JMESPath expressions (the connector profile: pure,
//!   bounded) over `{"input": …, "steps": [answers so far]}`; `output` builds the answer.
//! - `path_regex` is matched by the `regex` crate (linear time in the path), anchored at both
//!   ends, compiled once here, its compiled size bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::capability::Capability;
use super::connector::t1::T1;
pub use super::recipe_grammar::{is_method, is_path, is_scope_token};
use super::recipe_steps::expression;
use super::recipe_steps::{compile_step, pointer_escape};
pub use super::recipe_steps::{Step, ToolStep};
use super::schema::Schema;
use super::Problem;

/// What is wrong with a semantic block, if anything (seed 000 §3.6 step 3). Our rule, as the
/// seed defers to AGTP-METHODS: an object, with `intent` a non-empty string of at most 1024
/// characters; other members are kept, unread. A recipe's and a proposal's alike.
pub fn semantic_problem(s: &Value) -> Option<&'static str> {
    let Value::Object(obj) = s else {
        return Some("the semantic block must be an object");
    };
    match obj.get("intent") {
        Some(Value::String(i)) if !i.trim().is_empty() && i.len() <= 1024 => None,
        _ => {
            Some("the semantic block needs `intent`: a non-empty string of at most 1024 characters")
        }
    }
}

const MAX_RECIPES: usize = 256;
const MAX_STEPS: usize = 8;
/// Compiled-program size a `path_regex` may take (the default is 10 MiB).
const REGEX_SIZE: usize = 64 * 1024;

/// How a recipe matches the proposed path.
#[derive(Debug, Clone)]
pub enum PathMatch {
    Exact(String),
    Regex(regex::Regex),
}

impl PathMatch {
    pub fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(p) => p == path,
            Self::Regex(r) => r.is_match(path),
        }
    }
}

/// One recipe, compiled.
#[derive(Debug)]
pub struct Recipe {
    pub name: String,
    pub version: String,
    pub method: String,
    pub path: PathMatch,
    pub description: Option<String>,
    /// The composed behaviour's own scopes (seed 000 §6.1).
    pub required_scopes: BTreeSet<String>,
    /// The least trusted caller tier it serves (1 most trusted … 3).
    pub trust_tier: u8,
    pub steps: Vec<Step>,
    pub output: Option<T1>,
    pub input_schema: Schema,
    pub output_schema: Schema,
    /// Every scope an agent needs to have it synthesized: its own and its steps'.
    pub all_scopes: BTreeSet<String>,
    /// The recipe as written: captured on every contract made from it (seed 000 §3.5), so a
    /// contract keeps running it after the set is edited.
    pub source: Value,
}

impl Recipe {
    /// The pattern entry of DISCOVER /patterns (seed 000 §4.1).
    pub fn pattern(&self) -> Value {
        let mut p = Map::new();
        p.insert("recipe_name".into(), self.name.clone().into());
        p.insert("recipe_version".into(), self.version.clone().into());
        p.insert("method".into(), self.method.clone().into());
        match &self.path {
            PathMatch::Exact(s) => p.insert("path_exact".into(), s.clone().into()),
            PathMatch::Regex(_) => p.insert("path_regex".into(), self.source["path_regex"].clone()),
        };
        if let Some(d) = &self.description {
            p.insert("description".into(), d.clone().into());
        }
        let scopes: Vec<Value> = self.all_scopes.iter().cloned().map(Value::from).collect();
        p.insert("required_scopes".into(), scopes.into());
        if let Some(s) = self.source.get("semantic") {
            p.insert("semantic".into(), s.clone());
        }
        Value::Object(p)
    }

    /// The endpoint definition a contract made from this recipe serves (seed 000 §3.4).
    pub fn endpoint(&self, method: &str, path: &str) -> Value {
        let mut e = Map::new();
        e.insert("method".into(), method.into());
        e.insert("path".into(), path.into());
        for key in ["description", "semantic", "input_schema", "output_schema"] {
            if let Some(v) = self.source.get(key) {
                e.insert(key.into(), v.clone());
            }
        }
        Value::Object(e)
    }
}

/// The compiled recipe set.
#[derive(Debug, Default)]
pub struct RecipeSet {
    /// `sha-256:<hex>` of the file.
    pub digest: String,
    pub recipes: Vec<Arc<Recipe>>,
    /// The methods the server declares (`policies.methods`): the recipes' and `methods`.
    pub methods: BTreeSet<String>,
}

impl RecipeSet {
    /// The first recipe, in file order, that matches `(method, path)`.
    pub fn find(&self, method: &str, path: &str) -> Option<&Arc<Recipe>> {
        self.recipes
            .iter()
            .find(|r| r.method == method && r.path.matches(path))
    }

    /// Compiles a recipe file against the bundle's capabilities. `file` is its name in
    /// `rich.contracts`, for problem pointers.
    pub fn compile(
        file: &str,
        doc: &Value,
        digest: String,
        capabilities: &[Capability],
    ) -> Result<RecipeSet, Vec<Problem>> {
        let at = format!("contracts/{file}#");
        let mut problems = Vec::new();
        let Some(doc) = doc.as_object() else {
            return Err(vec![Problem::new(at, "a recipe set must be a JSON object")]);
        };
        let mut scopes_of: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        if let Some(map) = doc.get("capabilityScopes") {
            let Some(map) = map.as_object() else {
                return Err(vec![Problem::new(
                    format!("{at}/capabilityScopes"),
                    "must be an object: capability name → scope tokens",
                )]);
            };
            for (name, list) in map {
                let here = format!("{at}/capabilityScopes/{}", pointer_escape(name));
                if !capabilities.iter().any(|c| &c.name == name) {
                    problems.push(Problem::new(&here, "names no capability of the lockfile"));
                }
                scopes_of.insert(name, scope_list(Some(list), &here, true, &mut problems));
            }
        }
        let mut methods = BTreeSet::new();
        if let Some(list) = doc.get("methods") {
            match list.as_array() {
                Some(list) => {
                    for (i, m) in list.iter().enumerate() {
                        match m.as_str().filter(|m| is_method(m)) {
                            Some(m) => {
                                methods.insert(m.to_owned());
                            }
                            None => problems.push(Problem::new(
                                format!("{at}/methods/{i}"),
                                "a method is 1-32 of A-Z 0-9 _ -, starting with a letter",
                            )),
                        }
                    }
                }
                None => problems.push(Problem::new(format!("{at}/methods"), "must be an array")),
            }
        }
        let list = match doc.get("recipes").and_then(Value::as_array) {
            Some(l) if l.len() <= MAX_RECIPES => l,
            _ => {
                problems.push(Problem::new(
                    format!("{at}/recipes"),
                    format!("must be an array of at most {MAX_RECIPES} recipes"),
                ));
                return Err(problems);
            }
        };
        let mut recipes = Vec::with_capacity(list.len());
        let mut names = BTreeSet::new();
        let mut exact = BTreeSet::new();
        for (i, r) in list.iter().enumerate() {
            let here = format!("{at}/recipes/{i}");
            let Some(recipe) =
                compile_recipe(r, &here, capabilities, Some(&scopes_of), &mut problems)
            else {
                continue;
            };
            if !names.insert(recipe.name.clone()) {
                problems.push(Problem::new(format!("{here}/name"), "appears twice"));
            }
            if let PathMatch::Exact(p) = &recipe.path {
                if !exact.insert((recipe.method.clone(), p.clone())) {
                    problems.push(Problem::new(
                        format!("{here}/path_exact"),
                        "another recipe has the same method and path",
                    ));
                }
            }
            methods.insert(recipe.method.clone());
            recipes.push(Arc::new(recipe));
        }
        if problems.is_empty() {
            Ok(RecipeSet {
                digest,
                recipes,
                methods,
            })
        } else {
            Err(problems)
        }
    }
}

/// Compiles one recipe on its own (a contract's captured recipe is compiled again with this).
pub fn compile_recipe(
    r: &Value,
    at: &str,
    capabilities: &[Capability],
    // `None` for a contract's captured recipe: its scopes were captured with it.
    scopes_of: Option<&BTreeMap<&str, BTreeSet<String>>>,
    problems: &mut Vec<Problem>,
) -> Option<Recipe> {
    let before = problems.len();
    let Some(obj) = r.as_object() else {
        problems.push(Problem::new(at, "a recipe must be a JSON object"));
        return None;
    };
    let text = |key: &str, max: usize, problems: &mut Vec<Problem>| -> Option<String> {
        match obj.get(key).and_then(Value::as_str) {
            Some(s) if !s.is_empty() && s.len() <= max => Some(s.to_owned()),
            _ => {
                problems.push(Problem::new(
                    format!("{at}/{key}"),
                    format!("must be a string of 1 to {max} characters"),
                ));
                None
            }
        }
    };
    let name = text("name", 64, problems);
    if let Some(n) = &name {
        if !n
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            problems.push(Problem::new(
                format!("{at}/name"),
                "a recipe name is A-Z a-z 0-9 . _ -",
            ));
        }
    }
    let version = text("version", 64, problems);
    let method = match obj.get("method").and_then(Value::as_str) {
        Some(m) if is_method(m) => Some(m.to_owned()),
        _ => {
            problems.push(Problem::new(
                format!("{at}/method"),
                "a method is 1-32 of A-Z 0-9 _ -, starting with a letter",
            ));
            None
        }
    };
    let path = match (obj.get("path_exact"), obj.get("path_regex")) {
        (Some(Value::String(p)), None) if is_path(p) => Some(PathMatch::Exact(p.clone())),
        (Some(_), None) => {
            problems.push(Problem::new(
                format!("{at}/path_exact"),
                "must be a path of /-separated segments of A-Z a-z 0-9 . _ ~ -",
            ));
            None
        }
        (None, Some(Value::String(re))) if re.len() <= 1024 => {
            match regex::RegexBuilder::new(&format!("^(?:{re})$"))
                .size_limit(REGEX_SIZE)
                .build()
            {
                Ok(r) => Some(PathMatch::Regex(r)),
                Err(e) => {
                    problems.push(Problem::new(
                        format!("{at}/path_regex"),
                        format!("not a regular expression the matcher accepts: {e}"),
                    ));
                    None
                }
            }
        }
        _ => {
            problems.push(Problem::new(
                at,
                "exactly one of path_exact and path_regex (a string of at most 1024 bytes)",
            ));
            None
        }
    };
    let description = obj
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(s) = obj.get("semantic") {
        if semantic_problem(s).is_some() {
            problems.push(Problem::new(
                format!("{at}/semantic"),
                "must be an object with a non-empty `intent` string",
            ));
        }
    }
    let required_scopes = scope_list(
        obj.get("required_scopes"),
        &format!("{at}/required_scopes"),
        false,
        problems,
    );
    let trust_tier = match obj.get("trust_tier").and_then(Value::as_u64) {
        Some(t @ 1..=3) => t as u8,
        _ => {
            problems.push(Problem::new(
                format!("{at}/trust_tier"),
                "must be 1, 2 or 3: the least trusted caller tier the recipe serves",
            ));
            1
        }
    };
    let schema = |key: &str, problems: &mut Vec<Problem>| match obj.get(key) {
        Some(s) => Schema::compile(s, &format!("{at}/{key}"))
            .map_err(|ps| problems.extend(ps))
            .ok(),
        None => {
            problems.push(Problem::new(format!("{at}/{key}"), "is required"));
            None
        }
    };
    let input_schema = schema("input_schema", problems);
    let output_schema = schema("output_schema", problems);
    let mut all_scopes = required_scopes.clone();
    let mut steps = Vec::new();
    match obj.get("steps").and_then(Value::as_array) {
        Some(list) if (1..=MAX_STEPS).contains(&list.len()) => {
            for (i, s) in list.iter().enumerate() {
                let here = format!("{at}/steps/{i}");
                if let Some(step) = compile_step(s, &here, capabilities, problems) {
                    let name = &capabilities[step.capability].name;
                    match scopes_of.map(|m| m.get(name.as_str())) {
                        None => {}
                        Some(Some(scopes)) => all_scopes.extend(scopes.iter().cloned()),
                        Some(None) => problems.push(Problem::new(
                            format!("{here}/capability"),
                            "has no capabilityScopes entry: the scope a step needs is the operator's to name",
                        )),
                    }
                    steps.push(step);
                }
            }
        }
        _ => problems.push(Problem::new(
            format!("{at}/steps"),
            format!("must be an array of 1 to {MAX_STEPS} steps"),
        )),
    }
    let output = expression(obj.get("output"), &format!("{at}/output"), problems);
    if problems.len() > before {
        return None;
    }
    Some(Recipe {
        name: name?,
        version: version?,
        method: method?,
        path: path?,
        description,
        required_scopes,
        trust_tier,
        steps,
        output,
        input_schema: input_schema?,
        output_schema: output_schema?,
        all_scopes,
        source: r.clone(),
    })
}

fn scope_list(
    v: Option<&Value>,
    at: &str,
    non_empty: bool,
    problems: &mut Vec<Problem>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    match v.and_then(Value::as_array) {
        Some(list) if list.len() <= 32 && (!non_empty || !list.is_empty()) => {
            for s in list {
                match s.as_str().filter(|s| is_scope_token(s)) {
                    Some(s) => {
                        out.insert(s.to_owned());
                    }
                    None => problems.push(Problem::new(at, "each scope is a scope token")),
                }
            }
        }
        _ => problems.push(Problem::new(
            at,
            if non_empty {
                "must be an array of 1 to 32 scope tokens"
            } else {
                "must be an array of at most 32 scope tokens"
            },
        )),
    }
    out
}
