//! Swagger 2.0 read as the OpenAPI 3.0 document it describes (issue 59), so that one importer
//! judges both: `definitions` become `components/schemas`, a `body` parameter the request
//! body under each media type `consumes` names, `formData` parameters a form body (not JSON:
//! reported unchecked), the other parameters' inline type a `schema` (`collectionFormat` an
//! `explode`), each response's `schema` its content under each media type `produces` names,
//! `x-nullable` 3.0's `nullable`, `host` + `basePath` the server. Every `$ref` is rewritten to
//! where its target now is. What 3.0 cannot say, or the sidecar cannot check, is listed.
//!
//! Swagger 2.0 (the OpenAPI Specification 2.0) is the legacy format most older REST layers of
//! ERP, CRM and ITSM products still publish; converting it the way `swagger2openapi` does
//! keeps one set of translation rules, and so one summary line, for both.

use serde_json::{json, Map, Value};

mod schemas;

use schemas::{param_schema, refs, response, schema};

/// The document converted, and what could not be carried (with where it was).
pub struct Upgraded {
    pub doc: Value,
    pub untranslated: Vec<String>,
}

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "options", "head", "patch"];

/// Converts a document whose `swagger` is `"2.0"`.
pub fn upgrade(doc: &Value) -> Result<Upgraded, String> {
    let root = doc.as_object().ok_or("the document is not an object")?;
    let mut c = Convert {
        consumes: media_list(root.get("consumes")),
        produces: media_list(root.get("produces")),
        untranslated: Vec::new(),
    };
    let mut out = Map::new();
    out.insert("openapi".into(), json!("3.0.3"));
    for key in ["info", "tags", "externalDocs"] {
        if let Some(v) = root.get(key) {
            out.insert(key.into(), refs(v));
        }
    }
    if let Some(server) = server(root) {
        out.insert("servers".into(), json!([{ "url": server }]));
    }
    let mut components = Map::new();
    if let Some(defs) = root.get("definitions").and_then(Value::as_object) {
        let schemas = defs
            .iter()
            .map(|(name, s)| (name.clone(), schema(s)))
            .collect();
        components.insert("schemas".into(), Value::Object(schemas));
    }
    if let Some(params) = root.get("parameters").and_then(Value::as_object) {
        // A shared body or form parameter has no 3.0 parameter to become: an operation that
        // refers to one gets it inlined as its request body (`Convert::operation`).
        let mut kept = Map::new();
        for (name, p) in params {
            if !matches!(place(p), Some("body" | "formData")) {
                let at = format!("/parameters/{}", escape(name));
                kept.insert(name.clone(), c.parameter(p, &at));
            }
        }
        components.insert("parameters".into(), Value::Object(kept));
    }
    if let Some(responses) = root.get("responses").and_then(Value::as_object) {
        let produces = c.produces.clone();
        let converted = responses
            .iter()
            .map(|(name, r)| (name.clone(), response(r, &produces)))
            .collect();
        components.insert("responses".into(), Value::Object(converted));
    }
    out.insert("components".into(), Value::Object(components));
    let mut paths = Map::new();
    if let Some(all) = root.get("paths").and_then(Value::as_object) {
        for (path, item) in all {
            let at = format!("/paths/{}", escape(path));
            paths.insert(path.clone(), c.path_item(root, item, &at));
        }
    }
    out.insert("paths".into(), Value::Object(paths));
    Ok(Upgraded {
        doc: Value::Object(out),
        untranslated: c.untranslated,
    })
}

struct Convert {
    consumes: Vec<String>,
    produces: Vec<String>,
    untranslated: Vec<String>,
}

impl Convert {
    fn path_item(&mut self, root: &Map<String, Value>, item: &Value, at: &str) -> Value {
        let Some(item) = item.as_object() else {
            return item.clone();
        };
        let mut out = Map::new();
        // Path-level body and form parameters belong to each operation's body.
        let shared: Vec<Value> = item
            .get("parameters")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let plain: Vec<Value> = shared
            .iter()
            .filter_map(|p| {
                let p = parameter_target(root, p);
                (!matches!(place(p), Some("body" | "formData"))).then_some(p)
            })
            .enumerate()
            .map(|(i, p)| self.parameter(p, &format!("{at}/parameters/{i}")))
            .collect();
        if !plain.is_empty() {
            out.insert("parameters".into(), Value::Array(plain));
        }
        for (key, v) in item {
            if METHODS.contains(&key.as_str()) {
                let op_at = format!("{at}/{key}");
                out.insert(key.clone(), self.operation(root, &shared, v, &op_at));
            } else if key == "$ref" {
                out.insert(key.clone(), refs(v));
            }
        }
        Value::Object(out)
    }

    fn operation(
        &mut self,
        root: &Map<String, Value>,
        shared: &[Value],
        op: &Value,
        at: &str,
    ) -> Value {
        let Some(op) = op.as_object() else {
            return op.clone();
        };
        let consumes = op
            .get("consumes")
            .map_or_else(|| self.consumes.clone(), |c| media_list(Some(c)));
        let produces = op
            .get("produces")
            .map_or_else(|| self.produces.clone(), |p| media_list(Some(p)));
        let mut out = Map::new();
        for key in [
            "operationId",
            "summary",
            "description",
            "tags",
            "deprecated",
            "x-rich-reversibility",
        ] {
            if let Some(v) = op.get(key) {
                out.insert(key.into(), v.clone());
            }
        }
        // The operation's parameters override the path item's of the same name and place.
        let own: Vec<&Value> = op
            .get("parameters")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let mut all: Vec<&Value> = shared
            .iter()
            .filter(|s| {
                let s = parameter_target(root, s);
                !own.iter()
                    .any(|o| same_parameter(parameter_target(root, o), s))
            })
            .collect();
        all.extend(own.iter().copied());
        let mut params = Vec::new();
        let mut body = None;
        let mut form = Map::new();
        let mut form_required = Vec::new();
        for (i, p) in all.into_iter().enumerate() {
            let target = parameter_target(root, p);
            match place(target) {
                Some("body") => body = Some(target),
                Some("formData") => {
                    let name = param_str(target, "name");
                    if target.get("required").and_then(Value::as_bool) == Some(true) {
                        form_required.push(json!(name));
                    }
                    form.insert(name.to_owned(), param_schema(target));
                }
                // Only the operation's own: the path item's stay there.
                _ if own.iter().any(|o| std::ptr::eq(*o, p)) => {
                    params.push(self.parameter(p, &format!("{at}/parameters/{i}")));
                }
                _ => {}
            }
        }
        if !params.is_empty() {
            out.insert("parameters".into(), Value::Array(params));
        }
        if let Some(b) = body {
            let schema = b.get("schema").map(schema).unwrap_or(json!({}));
            let content: Map<String, Value> = consumes
                .iter()
                .map(|m| (m.clone(), json!({ "schema": schema })))
                .collect();
            out.insert(
                "requestBody".into(),
                json!({
                    "required": b.get("required").and_then(Value::as_bool).unwrap_or(false),
                    "content": content,
                }),
            );
        } else if !form.is_empty() {
            let files = form.values().any(|s| s["type"] == "file");
            let media = if files || consumes.iter().any(|m| m.starts_with("multipart/")) {
                "multipart/form-data"
            } else {
                "application/x-www-form-urlencoded"
            };
            let schema = json!({"type": "object", "properties": form, "required": form_required});
            out.insert(
                "requestBody".into(),
                json!({"content": { media: { "schema": schema } }}),
            );
        }
        let mut responses = Map::new();
        if let Some(all) = op.get("responses").and_then(Value::as_object) {
            for (code, r) in all {
                responses.insert(code.clone(), response(r, &produces));
            }
        }
        out.insert("responses".into(), Value::Object(responses));
        Value::Object(out)
    }

    /// A non-body parameter: its inline type as a `schema`, `collectionFormat` as `explode`.
    fn parameter(&mut self, p: &Value, at: &str) -> Value {
        let Some(obj) = p.as_object() else {
            return p.clone();
        };
        if obj.contains_key("$ref") {
            return refs(p);
        }
        let mut out = Map::new();
        for key in ["name", "in", "description", "required", "deprecated"] {
            if let Some(v) = obj.get(key) {
                out.insert(key.into(), v.clone());
            }
        }
        let mut schema = param_schema(p);
        if obj.get("type").and_then(Value::as_str) == Some("array") {
            match obj
                .get("collectionFormat")
                .and_then(Value::as_str)
                .unwrap_or("csv")
            {
                "csv" => {
                    out.insert("explode".into(), json!(false));
                }
                "multi" => {
                    out.insert("explode".into(), json!(true));
                }
                other => {
                    // Space-, tab- and pipe-separated arrays: the sidecar splits on commas
                    // (form, not exploded) or repeats, so this one is passed unchecked.
                    self.untranslated.push(format!(
                        "{at}: collectionFormat {other} is not checked (csv and multi are)"
                    ));
                    schema = Value::Null;
                }
            }
        }
        if !schema.is_null() {
            out.insert("schema".into(), schema);
        }
        Value::Object(out)
    }
}

/// A parameter, or the shared one its `$ref` names (`#/parameters/…`).
fn parameter_target<'a>(root: &'a Map<String, Value>, p: &'a Value) -> &'a Value {
    p.get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/parameters/"))
        .and_then(|name| root.get("parameters")?.get(unescape(name)))
        .unwrap_or(p)
}

/// Two parameters are one when their name and place are (the operation's replaces the path
/// item's).
fn same_parameter(a: &Value, b: &Value) -> bool {
    param_str(a, "name") == param_str(b, "name") && param_str(a, "in") == param_str(b, "in")
}

fn place(p: &Value) -> Option<&str> {
    p.get("in").and_then(Value::as_str)
}

fn param_str<'a>(p: &'a Value, key: &str) -> &'a str {
    p.get(key).and_then(Value::as_str).unwrap_or("")
}

fn media_list(v: Option<&Value>) -> Vec<String> {
    let list: Vec<String> = v
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() {
        // The specification's default when nothing is said.
        vec!["application/json".to_owned()]
    } else {
        list
    }
}

/// `host` + `basePath` (and the first scheme) as a server URL; `basePath` alone without a host.
fn server(root: &Map<String, Value>) -> Option<String> {
    let base = root.get("basePath").and_then(Value::as_str).unwrap_or("");
    match root.get("host").and_then(Value::as_str) {
        Some(host) => {
            let scheme = root
                .get("schemes")
                .and_then(Value::as_array)
                .and_then(|s| s.first())
                .and_then(Value::as_str)
                .unwrap_or("https");
            Some(format!("{scheme}://{host}{base}"))
        }
        None if !base.is_empty() => Some(base.to_owned()),
        None => None,
    }
}

fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

fn unescape(s: &str) -> String {
    s.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        json!({
            "swagger": "2.0",
            "info": {"title": "t", "version": "1"},
            "host": "erp.example", "basePath": "/api",
            "consumes": ["application/json"],
            "parameters": {"Page": {"name": "page", "in": "query", "type": "integer"}},
            "definitions": {
                "Order": {"type": "object", "required": ["qty"], "properties": {
                    "qty": {"type": "integer"},
                    "note": {"type": "string", "x-nullable": true},
                    "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}}}},
                "Line": {"type": "object", "discriminator": "kind"}
            },
            "paths": {"/orders/{id}": {
                "parameters": [{"name": "id", "in": "path", "required": true, "type": "string"}],
                "put": {
                    "parameters": [
                        {"name": "body", "in": "body", "required": true,
                         "schema": {"$ref": "#/definitions/Order"}},
                        {"$ref": "#/parameters/Page"},
                        {"name": "tags", "in": "query", "type": "array",
                         "items": {"type": "string"}},
                        {"name": "ids", "in": "query", "type": "array",
                         "items": {"type": "integer"}, "collectionFormat": "multi"},
                        {"name": "sep", "in": "query", "type": "array",
                         "items": {"type": "string"}, "collectionFormat": "pipes"}
                    ],
                    "produces": ["application/xml", "application/json"],
                    "responses": {"200": {"description": "ok",
                                          "schema": {"$ref": "#/definitions/Order"}}}
                },
                "post": {
                    "consumes": ["application/x-www-form-urlencoded"],
                    "parameters": [{"name": "qty", "in": "formData", "type": "integer",
                                    "required": true}],
                    "responses": {"201": {"description": "made"}}
                }
            }}
        })
    }

    #[test]
    fn a_swagger_2_0_document_reads_as_its_openapi_3_0_twin() {
        let Upgraded { doc, untranslated } = upgrade(&doc()).expect("converts");
        assert_eq!(doc["servers"][0]["url"], "https://erp.example/api");
        let order = &doc["components"]["schemas"]["Order"];
        assert_eq!(order["properties"]["note"]["nullable"], true);
        assert_eq!(
            order["properties"]["lines"]["items"]["$ref"],
            "#/components/schemas/Line"
        );
        assert_eq!(
            doc["components"]["schemas"]["Line"]["discriminator"],
            json!({"propertyName": "kind"})
        );
        let put = &doc["paths"]["/orders/{id}"]["put"];
        assert_eq!(
            put["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/Order"
        );
        assert_eq!(put["requestBody"]["required"], true);
        let params = put["parameters"].as_array().expect("parameters");
        assert_eq!(params[0]["$ref"], "#/components/parameters/Page");
        assert_eq!(params[1]["explode"], false, "csv is the default");
        assert_eq!(params[1]["schema"]["items"]["type"], "string");
        assert_eq!(params[2]["explode"], true, "multi");
        assert!(params[3].get("schema").is_none(), "pipes: unchecked");
        assert_eq!(untranslated.len(), 1, "{untranslated:?}");
        assert!(untranslated[0].contains("pipes"));
        assert_eq!(
            doc["components"]["parameters"]["Page"]["schema"]["type"],
            "integer"
        );
        // The path item's parameter stays on the path item.
        assert_eq!(doc["paths"]["/orders/{id}"]["parameters"][0]["name"], "id");
        let ok = &put["responses"]["200"]["content"];
        assert!(ok.get("application/json").is_some() && ok.get("application/xml").is_some());
        let post = &doc["paths"]["/orders/{id}"]["post"];
        let form = &post["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"];
        assert_eq!(form["properties"]["qty"]["type"], "integer");
        assert_eq!(form["required"], json!(["qty"]));
    }
}
