"""Every link in the built book resolves, offline.

    python tests/docs/check_links.py BOOK_DIR

Reads every HTML page mdBook wrote (except 404.html, whose links are site-absolute by design),
and checks each relative `href` and `src`: the file exists in the book, and a `#fragment`
names an element id in it. External links (http, https, mailto) are listed, not fetched: the
test machine has no network. Exits 1 listing every broken link.
"""

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "link", "script", "iframe"):
                self.links.append(a[key])


def parse(path, cache={}):
    if path not in cache:
        p = Page()
        p.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = p
    return cache[path]


def main():
    root = Path(sys.argv[1]).resolve()
    broken, checked, external = [], 0, set()
    pages = [p for p in root.rglob("*.html") if p.name != "404.html"]
    for page in pages:
        for link in parse(page).links:
            parts = urlsplit(link)
            if parts.scheme in ("http", "https", "mailto"):
                external.add(link)
                continue
            if parts.scheme or link.startswith("//") or link.startswith("javascript:"):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.exists() or root not in target.parents and target != root:
                broken.append(f"{page.relative_to(root)}: {link} (no file)")
                continue
            if parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in parse(target).ids:
                    broken.append(f"{page.relative_to(root)}: {link} (no #{parts.fragment})")
    if len(pages) < 20:
        broken.append(f"only {len(pages)} pages built")
    for b in broken:
        print(f"BROKEN {b}")
    print(f"{len(pages)} pages, {checked} internal links checked, {len(external)} external links not fetched")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
