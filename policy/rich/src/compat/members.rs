//! The parts of the inclusion check for bounds, object members and listed values.

use serde_json::{Map, Value};

use super::{num, Outcome, Roots, Verdict};

impl Roots<'_> {
    /// A length or count bound: the target's must be implied by the source's.
    pub(super) fn bound(
        &self,
        (sm, tm): (&Map<String, Value>, &Map<String, Value>),
        k: &str,
        lower: bool,
        at: &str,
        v: &mut Verdict,
    ) {
        let Some(tb) = num(tm, k) else {
            return;
        };
        let ok = num(sm, k).is_some_and(|sb| if lower { sb >= tb } else { sb <= tb });
        if !ok {
            v.add(
                Outcome::Breaking,
                at,
                format!("the target's {k} is not met by everything the source allows"),
            );
        }
    }

    /// Object members: the source's (`sm`) against the target's (`tm`).
    pub(super) fn objects(
        &self,
        (sm, tm): (&Map<String, Value>, &Map<String, Value>),
        at: &str,
        v: &mut Verdict,
        depth: usize,
        seen: &mut Vec<(String, String)>,
    ) {
        let empty = Map::new();
        let sp = sm
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let tp = tm
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required = |m: &Map<String, Value>| -> Vec<String> {
            m.get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let s_req = required(sm);
        for r in required(tm) {
            if !s_req.contains(&r) {
                v.add(
                    Outcome::Breaking,
                    &format!("{at}/properties/{r}"),
                    "the target requires a member the source does not",
                );
            }
        }
        let s_extra = sm
            .get("additionalProperties")
            .cloned()
            .unwrap_or(Value::Bool(true));
        let t_extra = tm
            .get("additionalProperties")
            .cloned()
            .unwrap_or(Value::Bool(true));
        // Members the target names: the source's schema for each (its own, or its
        // additionalProperties) must fit.
        for (name, t_schema) in tp {
            let s_schema = sp.get(name).unwrap_or(&s_extra);
            self.include(
                (s_schema, t_schema),
                &format!("{at}/properties/{name}"),
                v,
                depth + 1,
                seen,
            );
        }
        // Members only the source names, and members neither names.
        for (name, s_schema) in sp.iter().filter(|(n, _)| !tp.contains_key(*n)) {
            self.include(
                (s_schema, &t_extra),
                &format!("{at}/properties/{name}"),
                v,
                depth + 1,
                seen,
            );
        }
        if s_extra != Value::Bool(false) {
            self.include(
                (&s_extra, &t_extra),
                &format!("{at}/additionalProperties"),
                v,
                depth + 1,
                seen,
            );
        }
    }

    /// Whether the target (its listed values, types and bounds; nested objects are not
    /// walked) accepts `value`. Anything it cannot tell makes the verdict unknown.
    pub(super) fn accepts_value(
        &self,
        tm: &Map<String, Value>,
        value: &Value,
        at: &str,
        v: &mut Verdict,
    ) -> bool {
        let schema = Value::Object(tm.clone());
        let mut root = self.target.clone();
        if let (Value::Object(r), Value::Object(s)) = (&mut root, schema) {
            let defs = r.remove("$defs");
            let mut s = s;
            if let Some(d) = defs {
                s.insert("$defs".into(), d);
            }
            s.insert(
                "$schema".into(),
                Value::String(crate::schema::DIALECT_2020_12.into()),
            );
            return match crate::schema::Schema::compile(&Value::Object(s), at) {
                Ok(compiled) => compiled.check(value).is_ok(),
                Err(_) => {
                    v.add(Outcome::Unknown, at, "the target's schema does not compile");
                    true
                }
            };
        }
        v.add(Outcome::Unknown, at, "the target is not a schema object");
        true
    }
}
