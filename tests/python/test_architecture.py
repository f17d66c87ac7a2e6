"""docs/architecture.md (and the README's table of documents) names only what exists: every
repository path cited in backticks is there, and every function or type cited beside a path
is defined in that file, so a rename or a move that leaves the map behind fails here.

What counts as a citation (the rest of a line is prose and is not read):

- a *path* is a backticked token with a `/` or a source file's suffix (`.rs`, `.py`, `.js`,
  `.ts`, `.wit`, `.toml`, `.md`, `.mk`). It is read from the repository's root when its
  first part is a top-level entry (`core/src/io.rs`), else beside the paths cited before it
  in the same section, nearest first (`workers.rs` after `host-native/src/loader/mod.rs`,
  `scripts/build.js` in the row of `bindings/js/`), then in their parent folders. Build
  outputs (`target/...`) and placeholders (`shard-NNNNNN/`) are not paths.
- a *name* is a backticked identifier, plain or qualified (`next_job`, `Planner::next_job`,
  `zrecord.Dataset.write`, `_world.check_ranks_agree`; artifact names such as `meta.zr` or
  `dataset.json` are not names). It is cited in the path that follows it directly
  (`Name` (`path`), `Name`, `path`, `Name` in `path`, or through a chain such as `a` →
  `b` (`path`); a comma binds a plain word such as `copy` only inside parentheses); else
  in the path just before it inside the same parentheses (`path`, `a`, `b`), or the path
  that opens them (`path` (`a` on write, `b` on read)), looking outwards; else, for a
  qualified or CamelCase name, in the path last cited in the same list item, table row or
  paragraph. A name bound to no path is prose and is not checked.
- a name is defined when its last part (`method` of `Type::method`) appears as a
  definition in the file, or anywhere under a cited folder: `fn`, `struct`, `enum`,
  `trait`, `type`, `mod`, `const`, `static`, `impl`, an enum variant or a field `name:`
  in Rust; `def`, `class` or a module-level assignment in Python; `function`, `class`,
  `const`/`let`, a method or a property in JavaScript; a function, a field or a type in
  WIT. A name qualified by a module (`gather::gather`, `_world.check_ranks_agree`) must be
  defined in that module: the nearest file or folder of its name beside or above the path.
- every relative Markdown link leads to a file or folder.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"

SOURCE_SUFFIXES = (".rs", ".py", ".js", ".ts", ".wit", ".toml", ".md", ".mk")
# Suffixes of artifacts (data files, build outputs): `meta.zr` is a file name, not a name.
ARTIFACT_SUFFIXES = {"zr", "zrc", "zrk", "zrg", "json", "jsonl", "npy", "wasm", "bin", "idx", "parquet", "txt",
                     "lock", "so", "whl"}
PLACEHOLDER = re.compile(r"N+|DATE|NAME|DIR|PATH|OUT|URL")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?")
# Between a name and the path it is cited in: nothing, "(", ",", "in", "from", or ") in" as
# in (`a`, `b`) in `path`.
FORWARD = re.compile(r"\s*(?:\(|,|in|from|\)\s*in)?\s*")
# Between names cited in one path: an arrow, "or", "and", a comma.
CHAIN = re.compile(r"\s*(?:→|->|,|or|and)?\s*")

DEFINITIONS = {
    ".rs": [r"\b(?:fn|struct|enum|trait|type|mod|const|static|union)\s+{n}\b", r"macro_rules!\s*{n}\b",
            r"\bimpl\b[^{{;\n]*\b{n}\b", r'\bname\s*=\s*"{n}"', r"^\s*(?:pub(?:\([^)]*\))?\s+)?{n}\s*:", r"^\s*{n}\s*(?:\(|\{{|,|=)"],
    ".py": [r"^\s*(?:async\s+)?def\s+{n}\b", r"^\s*class\s+{n}\b", r"^{n}\s*[:=]"],
    ".js": [r"\bfunction\*?\s+{n}\b", r"\bclass\s+{n}\b", r"\b(?:const|let|var)\s+{n}\b",
            r"^\s*(?:static\s+)?(?:async\s+)?(?:get\s+|set\s+)?\*?{n}\s*\([^)]*\)\s*\{{", r"^\s*{n}\s*:"],
    ".wit": [r"^\s*(?:%)?{n}\s*:", r"\b(?:resource|record|enum|variant|flags|type|interface|world)\s+{n}\b",
             r"^\s*(?:%)?{n}\s*(?:,|\()"],
}
DEFINITIONS[".ts"] = DEFINITIONS[".js"] + [r"\b(?:interface|type)\s+{n}\b", r"^\s*(?:readonly\s+)?{n}\s*[?(:]"]


def top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.name not in {"target", ".venv", ".git", "node_modules"}}


@dataclass
class Token:
    text: str
    line: int
    start: int
    end: int
    kind: str = "other"  # "path", "name" or "other"
    path: "Path | None" = None  # a path token's resolved file or folder
    back: "Path | None" = None  # a name's path by the backward rules
    nested: bool = False  # inside parentheses


@dataclass
class Frame:
    opener: "Path | None" = None  # the path just before this "(", if any
    paths: list = field(default_factory=list)
    last: "Token | None" = None  # the last token inside these parentheses


def blocks(text: str):
    """(section, [(line number, line)]) per table row, list item and paragraph, outside code."""
    section, current, fenced = "", [], False
    out = []

    def flush():
        if current:
            out.append((section, list(current)))
            current.clear()

    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("#"):
            flush()
            section = line
            continue
        if not line.strip():
            flush()
            continue
        starts = line.startswith("|") or re.match(r"\s*(?:\d+\.|[-*])\s", line)
        if starts or (current and current[-1][1].startswith("|")):
            flush()
        current.append((no, line))
    flush()
    return out


def is_path(tok: str) -> bool:
    if " " in tok or "://" in tok or not re.fullmatch(r"[\w.\-/]+", tok) or tok.startswith("target/"):
        return False
    if any(PLACEHOLDER.fullmatch(part.split(".")[0]) for part in re.split(r"[/-]", tok) if part):
        return False
    return "/" in tok or tok.endswith(SOURCE_SUFFIXES) or tok in top_level()


def is_name(tok: str) -> bool:
    if not NAME.fullmatch(tok):
        return False
    return "." not in tok or tok.rsplit(".", 1)[1] not in ARTIFACT_SUFFIXES


def qualified(name: str) -> bool:
    """Qualified or CamelCase: a code name even with no parentheses around it."""
    return "::" in name or "." in name or bool(re.search(r"[A-Z][a-z]", name))


def plain(name: str) -> bool:
    """A plain word (`zr`, `copy`, `images`): a name only where the citation shape says so."""
    return not qualified(name) and "_" not in name


def backward(t: Token, stack: list, body: str) -> "Path | None":
    """The path a name is cited in when none follows it (see the module docs)."""
    for frame in reversed(stack[1:]):
        prev = frame.last
        if prev is not None and CHAIN.fullmatch(body[prev.end:t.start]):
            if prev.kind == "path" and prev.path is not None:
                return prev.path
            if prev.kind == "name" and prev.back is not None and prev.back in frame.paths:
                return prev.back
        if frame.opener is not None:
            return frame.opener
    if qualified(t.text) and stack[0].paths:
        return stack[0].paths[-1]
    return None


def resolve(tok: str, contexts: list) -> "Path | None":
    if tok.split("/")[0] in top_level():
        p = ROOT / tok
        return p if p.exists() else None
    folders = [c if c.is_dir() else c.parent for c in reversed(contexts)]
    for d in folders:
        if (d / tok).exists():
            return d / tok
    for d in folders:
        for up in d.parents:
            if (up / tok).exists() and up != ROOT.parent and ROOT in (up, *up.parents):
                return up / tok
    return ROOT / tok if (ROOT / tok).exists() else None


def homes(name: str, where: Path) -> list:
    """Where `name`, cited in `where`, must be defined."""
    parts = re.split(r"::|\.", name.removesuffix("()"))
    places = [where]
    if len(parts) > 1 and (parts[0][:1].islower() or parts[0].startswith("_")):
        # A module's name first (`gather::gather`, `_world.check_ranks_agree`): the name
        # is defined in that module, the nearest file or folder of that name.
        module = parts[0]
        base = where if where.is_dir() else where.parent
        for d in (base, *base.parents):
            if ROOT not in (d, *d.parents):
                break
            found = [m for m in (d / f"{module}.rs", d / f"{module}.py", d / module) if m.exists()]
            if found:
                places = found
                break
    return places


def defined(name: str, places: list) -> bool:
    last = re.split(r"::|\.", name.removesuffix("()"))[-1]
    for place in places:
        files = [place] if place.is_file() else sorted(place.rglob("*")) if place.is_dir() else []
        for f in files:
            patterns = DEFINITIONS.get(f.suffix)
            if not patterns or not f.is_file():
                continue
            body = f.read_text(errors="replace")
            if any(re.search(p.format(n=re.escape(last)), body, re.M) for p in patterns):
                return True
    return False


def check(text: str, doc: Path, section: "str | None" = None) -> list[str]:
    """Every untrue citation in `text` (the contents of `doc`), as `doc:line: what`."""
    errors = []
    rel = doc.relative_to(ROOT)
    contexts_by_section: dict[str, list] = {}
    for sec, lines in blocks(text):
        if section is not None and sec != section:
            continue
        contexts = contexts_by_section.setdefault(sec, [])
        body = "\n".join(line for _, line in lines)
        line_of = []
        for no, line in lines:
            line_of += [no] * (len(line) + 1)
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", body):
            target = m.group(1).split("#")[0]
            if target and "://" not in target and not target.startswith("mailto:"):
                if not (doc.parent / target).exists():
                    errors.append(f"{rel}:{line_of[m.start()]}: the link to {target} leads nowhere")
        tokens, stack, i, last = [], [Frame()], 0, None
        while i < len(body):
            c = body[i]
            if c == "`":
                j = body.find("`", i + 1)
                if j < 0:
                    break
                t = Token(body[i + 1:j], line_of[i], i, j + 1)
                if is_path(t.text):
                    t.kind, t.path = "path", resolve(t.text, contexts)
                    if t.path is None:
                        errors.append(f"{rel}:{t.line}: `{t.text}` does not exist in the repository")
                    else:
                        contexts.append(t.path)
                        for frame in stack:
                            frame.paths.append(t.path)
                elif is_name(t.text):
                    t.kind, t.nested = "name", len(stack) > 1
                    t.back = backward(t, stack, body)
                for frame in stack:
                    frame.last = t
                tokens.append(t)
                last, i = t, j + 1
                continue
            if c == "(":
                opener = last.path if last and last.kind == "path" and not body[last.end:i].strip() else None
                stack.append(Frame(opener))
            elif c == ")" and len(stack) > 1:
                stack.pop()
            i += 1

        def forward(k):
            if k + 1 >= len(tokens):
                return None
            gap, nxt = body[tokens[k].end:tokens[k + 1].start], tokens[k + 1]
            if "," in gap and plain(tokens[k].text) and not tokens[k].nested:
                return None
            if nxt.kind == "path" and FORWARD.fullmatch(gap):
                return nxt.path
            if nxt.kind == "name" and CHAIN.fullmatch(gap):
                return forward(k + 1)
            return None

        for k, t in enumerate(tokens):
            if t.kind != "name":
                continue
            where = forward(k) or t.back
            if where is None:
                continue
            places = homes(t.text, where)
            if not defined(t.text, places):
                home = ", ".join(f"`{p.relative_to(ROOT)}`" for p in places)
                errors.append(f"{rel}:{t.line}: `{t.text}` is cited in `{where.relative_to(ROOT)}`, but {home} "
                              f"does not define it")
    return errors


def test_architecture_cites_only_paths_and_names_that_exist():
    errors = check(ARCHITECTURE.read_text(), ARCHITECTURE)
    assert not errors, "docs/architecture.md is out of date:\n" + "\n".join(errors)


def test_readme_table_of_documents_leads_to_them():
    errors = check(README.read_text(), README, section="## Documentation")
    assert not errors, "\n".join(errors)


def test_a_made_up_citation_is_refused():
    # The checker against copies of the document that cite what does not exist: a renamed
    # method (each citation shape), a moved file and a dead link, each named with its line.
    text = ARCHITECTURE.read_text()
    cases = [
        ("`Zrecord::gather_stores` (`host-native/src/lib.rs`)", "`Zrecord::gather_nowhere` (`host-native/src/lib.rs`)",
         "`Zrecord::gather_nowhere` is cited in `host-native/src/lib.rs`"),
        ("`Store::gather` (`core/src/engine/read.rs`)", "`Store::not_a_method` (`core/src/engine/read.rs`)",
         "`Store::not_a_method` is cited in `core/src/engine/read.rs`"),
        ("`IoErrorKind::message` in `core/src/error.rs`", "`IoErrorKind::no_message` in `core/src/error.rs`",
         "`IoErrorKind::no_message` is cited in `core/src/error.rs`"),
        ("`core/src/format.rs` (`FileLayout`)", "`core/src/format.rs` (`FileShape`)",
         "`FileShape` is cited in `core/src/format.rs`"),
        ("`host-native/src/loader/buffers.rs`", "`host-native/src/loader/buffer_pool.rs`",
         "`host-native/src/loader/buffer_pool.rs` does not exist"),
        ("`make_batch` (`workers.rs`)", "`make_batch` (`worker.rs`)", "`worker.rs` does not exist"),
        ("(`Transform`,\n   `host-native/src/loader/mod.rs`;", "(`Transformer`,\n   `host-native/src/loader/mod.rs`;",
         "`Transformer` is cited in `host-native/src/loader/mod.rs`"),
        ("[format.md](format.md)", "[format.md](formats.md)", "the link to formats.md leads nowhere"),
    ]
    for old, new, expect in cases:
        assert old in text, f"the case's citation {old} is no longer in docs/architecture.md: pick another"
        line = text[:text.index(old)].count("\n") + 1
        errors = check(text.replace(old, new, 1), ARCHITECTURE)
        assert any(e.startswith(f"docs/architecture.md:{line}: {expect}") for e in errors), (old, errors)
    # Prose around the names is not read: the document as it is passes.
    assert not check(text, ARCHITECTURE)
