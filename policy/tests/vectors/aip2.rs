//! The quote-channel checks against messages signed by the agirails SDK (an independent
//! EIP-712 signer: eth-account under the SDK's own builders), and every refusal on a
//! tampered copy of them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use palisade_policy::aip2::{self, message, Kind, Rules};
use palisade_policy::ErrorCode;
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("aip2_sdk.json")).unwrap()
}

fn rules(v: &Value) -> Rules {
    let kernel = message::address(v["kernel"].as_str().unwrap()).unwrap();
    Rules {
        kernels: BTreeMap::from([(84532, kernel)]),
        grace_s: 30,
        max_ttl_s: 86_400,
    }
}

fn body(envelope: &Value) -> Vec<u8> {
    serde_json::to_vec(envelope).unwrap()
}

const TX: &str = "0xabababababababababababababababababababababababababababababababab";

fn code(envelope: &Value, chain: &str, tx: &str, now: u64) -> Option<ErrorCode> {
    let v = vectors();
    aip2::check(&body(envelope), chain, tx, &rules(&v), now)
        .err()
        .map(|r| r.code)
}

#[test]
fn sdk_signed_messages_pass_with_their_signer() {
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    for (i, env) in v["messages"].as_array().unwrap().iter().enumerate() {
        let c = aip2::check(&body(env), "84532", TX, &rules(&v), at).unwrap();
        let signer = if c.kind == Kind::CounterOffer {
            "consumer_address"
        } else {
            "provider_address"
        };
        let addr = v[signer].as_str().unwrap().to_ascii_lowercase();
        assert_eq!(c.signer, format!("did:ethr:84532:{addr}"), "message {i}");
        assert_eq!(c.nonce, 1);
        // The same message re-serialised (another member order, spacing) is the same message.
        let spaced = serde_json::to_vec_pretty(env).unwrap();
        let again = aip2::check(
            &spaced,
            "84532",
            &TX.to_uppercase().replace("0X", "0x"),
            &rules(&v),
            at,
        );
        assert_eq!(again.unwrap().fingerprint, c.fingerprint);
    }
}

#[test]
fn every_signed_member_is_covered() {
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    for env in v["messages"].as_array().unwrap() {
        let kind = Kind::from_wire(env["type"].as_str().unwrap()).unwrap();
        for (name, _) in kind.struct_type().fields {
            let mut t = env.clone();
            let m = &mut t["message"];
            let Some(field) = m.get_mut(*name) else {
                continue; // justificationHash is derived
            };
            *field = match field.clone() {
                Value::String(s) if s.starts_with("did:ethr:84532:0x") => {
                    Value::String(format!("did:ethr:84532:0x{}", "42".repeat(20)))
                }
                Value::String(s) if s.starts_with("0x") => {
                    let flipped = if s.ends_with('a') { "b" } else { "a" };
                    Value::String(format!("{}{flipped}", &s[..s.len() - 1]))
                }
                Value::String(s) if s == "USDC" => continue, // enum of one
                Value::String(s) => Value::String(format!("{s}1")),
                Value::Number(n) => Value::from(n.as_u64().unwrap() + 1),
                other => other,
            };
            let got = code(&t, "84532", TX, at);
            assert!(got.is_some(), "{kind:?}.{name} changed, still accepted");
        }
        // The justification is covered through its hash.
        if env["message"].get("justification").is_some() {
            let mut t = env.clone();
            t["message"]["justification"]["reason"] = "cheaper".into();
            assert_eq!(code(&t, "84532", TX, at), Some(ErrorCode::QuoteSignature));
        }
    }
}

#[test]
fn the_seed_surface_and_its_codes() {
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    let quote = &v["messages"][0];
    let other_tx = format!("0x{}", "cd".repeat(32));
    // §8.4: txId A posted to …/B → 400; chainId 8453 posted to …/84532/… → 400.
    assert_eq!(
        code(quote, "84532", &other_tx, at),
        Some(ErrorCode::QuoteChannel)
    );
    assert_eq!(code(quote, "8453", TX, at), Some(ErrorCode::QuoteChannel));
    assert_eq!(code(quote, "084532", TX, at), Some(ErrorCode::QuoteChannel));
    // A chain with no kernel configured.
    let mut on_8453 = quote.clone();
    on_8453["message"]["chainId"] = 8453.into();
    for m in ["provider", "consumer"] {
        let d = on_8453["message"][m]
            .as_str()
            .unwrap()
            .replace(":84532:", ":8453:");
        on_8453["message"][m] = d.into();
    }
    assert_eq!(
        code(&on_8453, "8453", TX, at),
        Some(ErrorCode::QuoteChainUnknown)
    );
    // A DID bound to another chain than the message.
    let mut cross = quote.clone();
    let d = cross["message"]["consumer"]
        .as_str()
        .unwrap()
        .replace(":84532:", ":8453:");
    cross["message"]["consumer"] = d.into();
    assert_eq!(code(&cross, "84532", TX, at), Some(ErrorCode::QuoteChannel));
    // TTL: expiresAt + 30 s grace.
    let expires = quote["message"]["expiresAt"].as_u64().unwrap();
    assert_eq!(code(quote, "84532", TX, expires + 30), None);
    assert_eq!(
        code(quote, "84532", TX, expires + 31),
        Some(ErrorCode::QuoteExpired)
    );
    // Created further ahead than the skew allows.
    assert_eq!(
        code(quote, "84532", TX, at - 301),
        Some(ErrorCode::QuoteMalformed)
    );
    // A counter-accept lives max_ttl after acceptedAt.
    let accept = &v["messages"][2];
    assert_eq!(code(accept, "84532", TX, at + 86_400 + 30), None);
    assert_eq!(
        code(accept, "84532", TX, at + 86_431),
        Some(ErrorCode::QuoteExpired)
    );
}

#[test]
fn shapes_are_refused_before_any_signature_work() {
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    let quote = &v["messages"][0];
    let malformed = |t: &Value| code(t, "84532", TX, at);
    let mut extra = quote.clone();
    extra["message"]["surprise"] = 1.into();
    assert_eq!(malformed(&extra), Some(ErrorCode::QuoteMalformed));
    let mut wrong_type = quote.clone();
    wrong_type["type"] = "agirails.counteroffer.v1".into();
    assert_eq!(malformed(&wrong_type), Some(ErrorCode::QuoteMalformed));
    let mut envelope_extra = quote.clone();
    envelope_extra["x"] = 1.into();
    assert_eq!(malformed(&envelope_extra), Some(ErrorCode::QuoteMalformed));
    let mut fraction = quote.clone();
    fraction["message"]["nonce"] = serde_json::json!(1.5);
    assert_eq!(malformed(&fraction), Some(ErrorCode::QuoteMalformed));
    let mut too_long = quote.clone();
    too_long["message"]["expiresAt"] = (at + 86_401).into();
    assert_eq!(malformed(&too_long), Some(ErrorCode::QuoteMalformed));
    for raw in [
        &b"[]"[..],
        b"{",
        b"{\"type\":1}",
        b"\xff",
        b"{\"a\":1,\"a\":2}",
    ] {
        let r = aip2::check(raw, "84532", TX, &rules(&v), at).unwrap_err();
        assert_eq!(r.code, ErrorCode::QuoteMalformed);
    }
}

#[test]
fn malleable_and_foreign_signatures_are_refused() {
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    let quote = &v["messages"][0];
    let sig = hex::decode(&quote["message"]["signature"].as_str().unwrap()[2..]).unwrap();
    // s' = n − s with v flipped recovers the same signer: refused as high-s.
    let n =
        hex::decode("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141").unwrap();
    let mut s = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = i16::from(n[i]) - i16::from(sig[32 + i]) - borrow;
        borrow = i16::from(d < 0);
        s[i] = (d + 256 * borrow) as u8;
    }
    let mut twin = sig.clone();
    twin[32..64].copy_from_slice(&s);
    twin[64] = if sig[64] == 27 { 28 } else { 27 };
    let mut t = quote.clone();
    t["message"]["signature"] = format!("0x{}", hex::encode(&twin)).into();
    let r = aip2::check(&body(&t), "84532", TX, &rules(&v), at).unwrap_err();
    assert_eq!(r.code, ErrorCode::QuoteSignature);
    assert!(r.detail.contains("high-s"), "{}", r.detail);
    // A counter-offer's signature moved onto the quote: a valid signature by someone else.
    let mut t = quote.clone();
    t["message"]["signature"] = v["messages"][1]["message"]["signature"].clone();
    assert_eq!(code(&t, "84532", TX, at), Some(ErrorCode::QuoteSignature));
    // Another kernel (verifyingContract) is another domain.
    let mut other = rules(&v);
    other.kernels.insert(84532, [7u8; 20]);
    let r = aip2::check(&body(quote), "84532", TX, &other, at).unwrap_err();
    assert_eq!(r.code, ErrorCode::QuoteSignature);
}

#[test]
fn the_relay_binds_the_txid_and_takes_the_chain_from_the_message() {
    use aip2::Channel;
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    for env in v["messages"].as_array().unwrap() {
        let c = aip2::check_on(&body(env), Channel::Relay { tx: TX }, &rules(&v), at).unwrap();
        assert_eq!(c.tx_id, TX);
        assert_eq!(c.chain_id, 84532);
        let provider = message::address(v["provider_address"].as_str().unwrap()).unwrap();
        let consumer = message::address(v["consumer_address"].as_str().unwrap()).unwrap();
        assert_eq!(
            (c.provider.address, c.consumer.address),
            (provider, consumer)
        );
        assert_eq!(
            c.signature,
            env["message"]["signature"].as_str().unwrap().to_lowercase()
        );
        let other = format!("0x{}", "bb".repeat(32));
        let r = aip2::check_on(&body(env), Channel::Relay { tx: &other }, &rules(&v), at);
        assert_eq!(r.unwrap_err().code, ErrorCode::QuoteChannel);
        let mut no_kernel = rules(&v);
        no_kernel.kernels.clear();
        let r = aip2::check_on(&body(env), Channel::Relay { tx: TX }, &no_kernel, at);
        assert_eq!(r.unwrap_err().code, ErrorCode::QuoteChainUnknown);
    }
}

#[test]
fn the_python_sdk_relay_form_of_a_quote_passes_on_the_relay_only() {
    use aip2::Channel;
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    let snake = &v["relay_quote"];
    assert!(snake["message"].get("tx_id").is_some());
    let relay = aip2::check_on(&body(snake), Channel::Relay { tx: TX }, &rules(&v), at).unwrap();
    let camel = aip2::check(&body(&v["messages"][0]), "84532", TX, &rules(&v), at).unwrap();
    // One message, one signed digest, whichever form carried it.
    assert_eq!(relay.digest, camel.digest);
    assert_eq!(relay.signature, camel.signature);
    // The quote channel forwards to an agent: only AIP-2's own form passes there.
    assert_eq!(
        code(snake, "84532", TX, at),
        Some(ErrorCode::QuoteMalformed)
    );
    // A changed value in the snake_case form is still caught by the signature.
    let mut forged = snake.clone();
    forged["message"]["quoted_amount"] = "1".into();
    let r = aip2::check_on(&body(&forged), Channel::Relay { tx: TX }, &rules(&v), at);
    assert_eq!(r.unwrap_err().code, ErrorCode::QuoteSignature);
}

/// `env` with its signature respelled: `v` as 0/1 instead of 27/28, and/or the hex in upper
/// case (the schema's pattern allows both; `recover` accepts both `v` forms).
fn respelled(env: &Value, low_v: bool, upper: bool) -> Value {
    let mut e = env.clone();
    let sig = e["message"]["signature"].as_str().unwrap().to_owned();
    let (rs, v) = sig[2..].split_at(128);
    let mut v = u8::from_str_radix(v, 16).unwrap();
    if low_v {
        v -= 27;
    }
    let hex = format!("{rs}{v:02x}");
    e["message"]["signature"] = Value::String(format!(
        "0x{}",
        if upper { hex.to_uppercase() } else { hex }
    ));
    e
}

/// Issue 44: one signed message has one identity, however its signature, DIDs, txId or chain
/// are spelled: the relay's dedup key (the signature), the nonce key (type, signer, nonce) and
/// the fingerprint a repeat is recognised by are the same for every accepted spelling, and a
/// spelling that would be another identity is refused instead.
#[test]
fn one_identity_per_signed_message_whatever_the_spelling() {
    let v = vectors();
    let at = v["at"].as_u64().unwrap();
    let rules = rules(&v);
    for env in v["messages"].as_array().unwrap() {
        let first = aip2::check(&body(env), "84532", TX, &rules, at).unwrap();
        assert!(first.signature.ends_with("1b") || first.signature.ends_with("1c"));
        for (low_v, upper) in [(true, false), (false, true), (true, true)] {
            let again = respelled(env, low_v, upper);
            let c = aip2::check(&body(&again), "84532", TX, &rules, at)
                .unwrap_or_else(|r| panic!("low_v {low_v} upper {upper}: {r}"));
            assert_eq!(c.signature, first.signature, "low_v {low_v} upper {upper}");
            assert_eq!(c.dedup_key(), first.dedup_key());
            assert_eq!(
                c.fingerprint, first.fingerprint,
                "a repeat, not another message"
            );
            // The relay's form too.
            let relay =
                aip2::check_on(&body(&again), aip2::Channel::Relay { tx: TX }, &rules, at).unwrap();
            assert_eq!(relay.signature, first.signature);
        }
        // The path's txId in upper case: the same transaction, the same message.
        let upper_tx = TX.to_uppercase().replace("0X", "0x");
        let c = aip2::check(&body(env), "84532", &upper_tx, &rules, at).unwrap();
        assert_eq!((c.tx_id.as_str(), c.fingerprint), (TX, first.fingerprint));
        // Other spellings of the chain: the path takes canonical decimal only.
        for chain in ["084532", "+84532", "0x14a34", " 84532"] {
            let r = aip2::check(&body(env), chain, TX, &rules, at).unwrap_err();
            assert_eq!(r.code, ErrorCode::QuoteChannel, "{chain}");
        }
        // chainId as a float or a string in the message: not an integer, refused.
        for spelled in [serde_json::json!(84532.0), serde_json::json!("84532")] {
            let mut e = env.clone();
            e["message"]["chainId"] = spelled.clone();
            let r = aip2::check(&body(&e), "84532", TX, &rules, at).unwrap_err();
            assert_eq!(r.code, ErrorCode::QuoteMalformed, "{spelled}");
        }
        // A nonce as a float: refused, never a second key for nonce 1.
        let mut e = env.clone();
        e["message"]["nonce"] = serde_json::json!(1.0);
        assert!(aip2::check(&body(&e), "84532", TX, &rules, at).is_err());
    }
    // The signer's DID: every accepted spelling of one address is one signer (and so one
    // nonce space). The DID is signed, so a respelling is checked with the parser directly.
    let addr = v["provider_address"].as_str().unwrap();
    let lower = addr.to_ascii_lowercase();
    let spellings = [
        format!("did:ethr:84532:{addr}"),
        format!("did:ethr:84532:{lower}"),
        format!("did:ethr:{addr}"),
        format!("did:ethr:0x{}", lower[2..].to_uppercase()),
        // A chain id with a leading zero reads as the same chain: the same signer.
        format!("did:ethr:084532:{lower}"),
    ];
    for s in &spellings {
        let (chain, a) = message::did_ethr(s).unwrap();
        assert!(chain.is_none() || chain == Some(84532), "{s}");
        assert_eq!(hex::encode(a), lower[2..], "{s}");
    }
}
