#![allow(clippy::unwrap_used)]
use serde_json::json;

use super::*;

const DIALECT: &str = crate::schema::DIALECT_2020_12;

fn compiled(doc: Value) -> Parameters {
    let mut problems = Vec::new();
    let p = Parameters::compile(&doc, "#/structural/parameters", false, &mut problems).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    p
}

fn params() -> Parameters {
    compiled(json!({
        "path": {"projectId": {"required": true,
                                "schema": {"$schema": DIALECT, "type": "string", "format": "uuid", "maxLength": 36}}},
        "query": {
            "pageSize": {"required": false, "schema": {"$schema": DIALECT, "type": "integer", "minimum": 1, "maximum": 500}},
            "states": {"required": false, "schema": {"$schema": DIALECT, "type": "array",
                        "items": {"enum": ["INPROGRESS", "CLOSED"]}}},
            "archived": {"schema": {"$schema": DIALECT, "type": "boolean"}},
            "contactID": {"required": true, "schema": {"$schema": DIALECT, "type": "string"}}
        },
        "header": {"Xero-Tenant-Id": {"required": true, "schema": {"$schema": DIALECT, "type": "string"}}}
    }))
}

/// The request's headers: the tenant header the fixture requires, nothing else.
fn tenant(name: &str) -> Vec<Option<&'static str>> {
    match name {
        "xero-tenant-id" => vec![Some("t-1")],
        _ => Vec::new(),
    }
}

fn refused(p: &Parameters, path: &[(&str, &str)], query: &str) -> Refusal {
    p.check(path, Some(query), &tenant).unwrap_err()
}

#[test]
fn header_parameters_are_checked_by_lower_case_name() {
    let p = params();
    let id = [("projectId", "b021e7ad-4ba0-4d38-9b0b-2f9d2f6c1b4e")];
    let q = Some("contactID=c");
    p.check(&id, q, &tenant).unwrap();
    let missing = p.check(&id, q, &|_| Vec::new()).unwrap_err();
    assert_eq!(missing.location.as_deref(), Some("/header/xero-tenant-id"));
    let twice = p
        .check(&id, q, &|n| {
            if n == "xero-tenant-id" {
                vec![Some("a"), Some("b")]
            } else {
                vec![]
            }
        })
        .unwrap_err();
    assert_eq!(twice.location.as_deref(), Some("/header/xero-tenant-id"));
    let opaque = p
        .check(&id, q, &|n| {
            if n == "xero-tenant-id" {
                vec![None]
            } else {
                vec![]
            }
        })
        .unwrap_err();
    assert!(opaque.detail.contains("not text"), "{}", opaque.detail);
    // OpenAPI's ignored headers are never parameters.
    let ignored = compiled(
        json!({"header": {"Content-Type": {"required": true, "schema": {"$schema": DIALECT, "const": "x"}}}}),
    );
    ignored.check(&[], None, &|_| Vec::new()).unwrap();
    // `simple` style: an array from one comma-separated value.
    let list = compiled(
        json!({"header": {"X-Tags": {"schema": {"$schema": DIALECT, "type": "array", "items": {"type": "integer"}, "maxItems": 2}}}}),
    );
    list.check(&[], None, &|_| vec![Some("1,2")]).unwrap();
    let r = list.check(&[], None, &|_| vec![Some("1,2,3")]).unwrap_err();
    assert_eq!(r.location.as_deref(), Some("/header/x-tags"));
}

#[test]
fn typed_values_pass_and_each_wrong_one_names_its_parameter() {
    let p = params();
    let id = [("projectId", "b021e7ad-4ba0-4d38-9b0b-2f9d2f6c1b4e")];
    p.check(
        &id,
        Some("contactID=c1&pageSize=50&states=CLOSED&states=INPROGRESS&archived=false&other=x"),
        &tenant,
    )
    .unwrap();
    for (query, location) in [
        ("pageSize=50", "/query/contactID"), // required, missing
        ("contactID=c&pageSize=fifty", "/query/pageSize"), // not an integer
        ("contactID=c&pageSize=501", "/query/pageSize"), // beyond maximum
        ("contactID=c&pageSize=1&pageSize=2", "/query/pageSize"), // twice
        ("contactID=c&states=OPEN", "/query/states"), // not in the enum
        ("contactID=c&archived=yes", "/query/archived"), // not a boolean
        ("contactID=c&pageSize=9007199254740993", "/query/pageSize"),
    ] {
        let r = refused(&p, &id, query);
        assert_eq!(r.code, ErrorCode::ContractInput, "{query}");
        assert_eq!(r.location.as_deref(), Some(location), "{query}: {r:?}");
        assert!(
            !r.detail.contains("fifty") && !r.detail.contains("OPEN"),
            "{r:?}"
        );
    }
    // A path value is percent-decoded before it is checked.
    let long = [("projectId", "%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61")];
    assert_eq!(
        refused(&p, &long, "contactID=c").location.as_deref(),
        Some("/path/projectId")
    );
    // Header parameters are recorded, not checked.
    p.check(&id, Some("contactID=c"), &tenant).unwrap();
}

#[test]
fn schemas_must_declare_their_dialect_and_places_are_known() {
    let mut problems = Vec::new();
    Parameters::compile(
        &json!({"query": {"q": {"schema": {"type": "string"}}}, "matrix": {}}),
        "#/p",
        false,
        &mut problems,
    );
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|p| p.contains("#/p/query/q/schema")),
        "{text:?}"
    );
    assert!(text.iter().any(|p| p.contains("#/p/matrix")), "{text:?}");
}

#[test]
fn path_values_follow_the_template() {
    assert_eq!(
        path_values(
            "GET /projects/{projectId}/time/{timeEntryId}",
            "/projects/p1/time/t2"
        ),
        [("projectId", "p1"), ("timeEntryId", "t2")]
    );
    assert!(path_values("GET /projects", "/projects").is_empty());
}

/// `n` filler pairs (`f0=1&f1=1&…&`), each different, ending in `&`.
fn filler(n: usize) -> String {
    (0..n).map(|i| format!("f{i}=1&")).collect()
}

#[test]
fn a_query_is_read_whole_or_refused_never_checked_on_a_prefix() {
    let p = params();
    let id = [("projectId", "b021e7ad-4ba0-4d38-9b0b-2f9d2f6c1b4e")];
    // Issue 44: a value past the old 1,024-pair prefix was never read. At the bound it is.
    let at = format!("contactID=c&{}pageSize=501", filler(MAX_QUERY_PAIRS - 2));
    let r = refused(&p, &id, &at);
    assert_eq!(r.code, ErrorCode::ContractInput);
    assert_eq!(r.location.as_deref(), Some("/query/pageSize"));
    // A name given twice, once before the filler and once after: still twice.
    let twice = format!(
        "contactID=c&pageSize=5&{}pageSize=501",
        filler(MAX_QUERY_PAIRS - 3)
    );
    assert_eq!(
        refused(&p, &id, &twice).location.as_deref(),
        Some("/query/pageSize")
    );
    // One pair over the bound: refused as too many, whatever the values.
    let over = format!("contactID=c&{}pageSize=5", filler(MAX_QUERY_PAIRS - 1));
    let r = refused(&p, &id, &over);
    assert_eq!(r.code, ErrorCode::QueryTooManyPairs);
    assert_eq!(r.status(), 400);
    // One under the bound, all values good: passes.
    let under = format!("contactID=c&{}pageSize=5", filler(MAX_QUERY_PAIRS - 3));
    p.check(&id, Some(&under), &tenant).unwrap();
    // Empty pieces are not pairs (the form parser skips them, so does the count).
    let empties = format!("contactID=c&{}pageSize=5", "&".repeat(4 * MAX_QUERY_PAIRS));
    p.check(&id, Some(&empties), &tenant).unwrap();
    // Length: at the bound read, one byte over refused 414.
    let pad = |len: usize| {
        let head = "contactID=c&pageSize=5&x=";
        format!("{head}{}", "a".repeat(len - head.len()))
    };
    p.check(&id, Some(&pad(MAX_QUERY_BYTES)), &tenant).unwrap();
    let r = refused(&p, &id, &pad(MAX_QUERY_BYTES + 1));
    assert_eq!(r.code, ErrorCode::QueryTooLong);
    assert_eq!(r.status(), 414);
    // A contract without query parameters does not read the query at all.
    let none = compiled(json!({"path": {}}));
    none.check(&[], Some(&filler(10 * MAX_QUERY_PAIRS)), &tenant)
        .unwrap();
}

/// A read connection's query (issue 37): declared names typed as checked, others text, a
/// repeated undeclared name an array; the connector's object written back, its names in order.
#[test]
fn a_query_as_the_connector_reads_it_and_writes_it() {
    let p = params();
    let q = "pageSize=20&states=CLOSED&states=INPROGRESS&contactID=c%201&other=x&more=1&more=2";
    assert_eq!(
        p.query_object(Some(q)).unwrap(),
        json!({"pageSize": 20, "states": ["CLOSED", "INPROGRESS"], "contactID": "c 1",
               "other": "x", "more": ["1", "2"]})
    );
    // Text that is not the declared type is the contract's refusal, at its location.
    let r = p
        .query_object(Some("pageSize=many&contactID=c"))
        .unwrap_err();
    assert_eq!(r.code, ErrorCode::ContractInput);
    assert_eq!(r.location.as_deref(), Some("/query/pageSize"));
    assert_eq!(plain_query_object(None).unwrap(), json!({}));
    assert_eq!(
        query_string(&json!({"a b": "x&y", "n": 5, "t": true, "list": [1, "z"], "gone": null}))
            .unwrap()
            .as_deref(),
        Some("a+b=x%26y&list=1&list=z&n=5&t=true")
    );
    assert_eq!(query_string(&json!({})).unwrap(), None);
    for bad in [json!([1]), json!({"o": {"x": 1}}), json!({"l": [[1]]})] {
        let r = query_string(&bad).unwrap_err();
        assert_eq!(r.code, ErrorCode::ConnectorPostcondition, "{bad}");
    }
    assert_eq!(
        query_string(&json!({"o": {"x": 1}}))
            .unwrap_err()
            .location
            .as_deref(),
        Some("/o")
    );
}
