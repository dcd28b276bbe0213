//! Reading a file's imports from its tokens, and resolving a path to the module it lands in.

use super::*;

pub(super) fn is_punct(t: Option<&TokenTree>, c: char) -> bool {
    matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

pub(super) fn is_path_sep(tokens: &[TokenTree], i: usize) -> bool {
    is_punct(tokens.get(i), ':') && is_punct(tokens.get(i + 1), ':')
}

/// The paths a path or use tree starting at `tokens[i]` names, each with `prefix` before it.
pub(super) fn paths_from(
    tokens: &[TokenTree],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    let mut path = prefix;
    loop {
        match tokens.get(i) {
            Some(TokenTree::Ident(id)) => {
                path.push(id.to_string());
                if is_path_sep(tokens, i + 1) {
                    i += 3;
                    continue;
                }
                out.push(path);
                return;
            }
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                // `{a, b::c, self}`: each item a tree of its own.
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                let mut start = 0;
                for k in 0..=inner.len() {
                    if k == inner.len() || is_punct(inner.get(k), ',') {
                        if start < k {
                            paths_from(&inner[start..k], 0, path.clone(), out);
                        }
                        start = k + 1;
                    }
                }
                return;
            }
            _ => {
                // `*` or the end: the path so far.
                out.push(path);
                return;
            }
        }
    }
}

/// A path a file names, and whether it is a re-export (`pub use`, `pub(crate) use`).
pub(super) type Named = (Vec<String>, bool);

/// Every path a file's tokens name, outside `mod tests { … }`.
pub(super) fn referenced_paths(stream: TokenStream, out: &mut Vec<Named>) {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Ident(id) if id == "mod" => {
                if let (Some(TokenTree::Ident(name)), Some(TokenTree::Group(_))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    if name == "tests" {
                        i += 3;
                        continue;
                    }
                }
            }
            TokenTree::Ident(id) if id == "use" => {
                // A use tree: its first segment may be a child module, `crate` or `super`.
                let reexport = match (
                    i.checked_sub(1).map(|k| &tokens[k]),
                    i.checked_sub(2).map(|k| &tokens[k]),
                ) {
                    (Some(TokenTree::Ident(p)), _) => p == "pub",
                    (Some(TokenTree::Group(g)), Some(TokenTree::Ident(p))) => {
                        g.delimiter() == Delimiter::Parenthesis && p == "pub"
                    }
                    _ => false,
                };
                let mut found = Vec::new();
                paths_from(&tokens, i + 1, Vec::new(), &mut found);
                out.extend(found.into_iter().map(|p| (p, reexport)));
                while i < tokens.len() && !is_punct(tokens.get(i), ';') {
                    i += 1;
                }
                continue;
            }
            TokenTree::Ident(id)
                if (id == "crate" || id == "super") && is_path_sep(&tokens, i + 1) =>
            {
                // A path in code: not preceded by `::` (then it is not the start of a path).
                let preceded = i >= 2 && is_path_sep(&tokens, i - 2);
                if !preceded {
                    let mut found = Vec::new();
                    paths_from(&tokens, i, Vec::new(), &mut found);
                    out.extend(found.into_iter().map(|p| (p, false)));
                }
            }
            TokenTree::Ident(_) if is_path_sep(&tokens, i + 1) => {
                let preceded = i >= 2 && is_path_sep(&tokens, i - 2);
                if !preceded {
                    let mut found = Vec::new();
                    paths_from(&tokens, i, Vec::new(), &mut found);
                    out.extend(found.into_iter().map(|p| (p, false)));
                }
            }
            TokenTree::Group(g) => referenced_paths(g.stream(), out),
            _ => {}
        }
        i += 1;
    }
}

/// The module a path from module `from` lands in (the longest known module prefix) and the
/// name it names there, if any. `None` for a path outside the crate (another crate, a local
/// name).
pub(super) fn resolve(
    from: &str,
    path: &[String],
    known: &BTreeMap<String, PathBuf>,
) -> Option<(String, Option<String>)> {
    let here: Vec<String> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").map(str::to_owned).collect()
    };
    let mut segs: Vec<String> = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("super") => {
            // `super` of `a::b` (a/b.rs or a/b/mod.rs) is `a`.
            segs = here[..here.len().saturating_sub(1)].to_vec();
            rest = &rest[1..];
            while rest.first().map(String::as_str) == Some("super") {
                segs.pop();
                rest = &rest[1..];
            }
        }
        Some("self") => {
            segs = here.clone();
            rest = &rest[1..];
        }
        Some(first) => {
            // Relative: only a child module of `from` counts (anything else is an imported
            // name, whose import was read where it was made, or another crate).
            let mut child = here.clone();
            child.push(first.to_owned());
            if !known.contains_key(&child.join("::")) {
                return None;
            }
            segs = here.clone();
        }
        None => return None,
    }
    segs.extend(rest.iter().cloned());
    (0..=segs.len()).rev().find_map(|n| {
        let m = segs[..n].join("::");
        known.contains_key(&m).then(|| (m, segs.get(n).cloned()))
    })
}
