#!/usr/bin/env python3
"""Generates kaas's Kafka message codec from Kafka's JSON message schemas.

    scripts/codegen/generate.py [--out-dir DIR] [SCHEMA_DIR]

SCHEMA_DIR defaults to ../shared/kafka-messages (beside the repository). The
schemas are the protocol spec; they are read here and never committed. The
output is Rust source under core/src/protocol/messages/, committed, so a build
never needs the schemas. Re-run after changing API_NAMES below and commit the
result together with this script.

--out-dir writes the same files elsewhere instead: scripts/codegen/check
generates into a scratch directory and compares, so that a hand edit of the
generated code, or a generator change committed without its output, fails
the test suite.

Every generated struct has `decode(reader, version)`, `encode(writer,
version)` and, for tests and fuzzing, `sample(gen, version)` which fills every
field that exists in that version with a random value.
"""

import argparse
import json
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT_DIR = os.path.join(ROOT, "core", "src", "protocol", "messages")

# The APIs kaas decodes. Adding one here and re-running adds its codec; the
# broker advertises only the ones it also has a handler for.
API_NAMES = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
    "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup",
    "DescribeGroups", "ListGroups", "ApiVersions", "CreateTopics", "DeleteTopics",
    "DeleteRecords", "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn",
    "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit",
    "DescribeConfigs", "AlterConfigs", "IncrementalAlterConfigs", "CreatePartitions",
    "DeleteGroups", "OffsetDelete", "DescribeCluster", "DescribeProducers",
    "DescribeTransactions", "ListTransactions", "DescribeLogDirs",
]
# Schemas of type "data": payloads nested inside other messages.
DATA_NAMES = ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]

RUST_KEYWORDS = {"type", "match", "ref", "move", "loop", "where", "struct", "enum",
                 "fn", "impl", "mod", "use", "self", "crate", "in", "for", "if",
                 "else", "let", "mut", "pub", "return", "static", "trait", "true",
                 "false", "while", "async", "await", "dyn", "box", "yield", "const"}

PRIMITIVES = {
    "bool": ("bool", "false"),
    "int8": ("i8", "0"),
    "int16": ("i16", "0"),
    "uint16": ("u16", "0"),
    "int32": ("i32", "0"),
    "uint32": ("u32", "0"),
    "int64": ("i64", "0"),
    "float64": ("f64", "0.0"),
    "uuid": ("wire::Uuid", "wire::Uuid::ZERO"),
}

OPT = "::std::option::Option"
VEC = "::std::vec::Vec"
STRING = "::std::string::String"
BYTES = "::bytes::Bytes"
RESULT = "::std::result::Result"


def load(path):
    with open(path) as f:
        text = "\n".join(line for line in f if not line.strip().startswith("//"))
    return json.loads(text)


class Versions:
    """A version range such as "3+", "0-12", "5" or "none"."""

    def __init__(self, spec, default=None):
        spec = (spec if spec is not None else default or "none").strip()
        if spec == "none":
            self.lo, self.hi = None, None
        elif spec.endswith("+"):
            self.lo, self.hi = int(spec[:-1]), None
        elif "-" in spec:
            lo, hi = spec.split("-")
            self.lo, self.hi = int(lo), int(hi)
        else:
            self.lo = self.hi = int(spec)

    def empty(self):
        return self.lo is None

    def contains(self, v):
        return self.lo is not None and v >= self.lo and (self.hi is None or v <= self.hi)

    def covers(self, other):
        """True if every version in `other` is in self."""
        if other.empty():
            return True
        if self.empty():
            return False
        if other.lo < self.lo:
            return False
        if self.hi is None:
            return True
        return other.hi is not None and other.hi <= self.hi

    def intersect(self, other):
        if self.empty() or other.empty():
            return Versions("none")
        lo = max(self.lo, other.lo)
        his = [h for h in (self.hi, other.hi) if h is not None]
        hi = min(his) if his else None
        if hi is not None and hi < lo:
            return Versions("none")
        r = Versions("none")
        r.lo, r.hi = lo, hi
        return r

    def cond(self, var="version", within=None):
        """A Rust boolean expression for `var` in this range, simplified
        against `within` (the range the enclosing message exists in)."""
        if self.empty():
            return "false"
        if within is not None and self.covers(within):
            return "true"
        parts = []
        if within is None or within.lo is None or self.lo > within.lo:
            parts.append(f"{var} >= {self.lo}")
        if self.hi is not None and (within is None or within.hi is None or self.hi < within.hi):
            parts.append(f"{var} <= {self.hi}")
        return " && ".join(parts) if parts else "true"


def snake(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if s in RUST_KEYWORDS else s


class Field:
    def __init__(self, spec, msg_versions, flexible):
        self.name = spec["name"]
        self.ident = snake(self.name)
        self.type = spec["type"]
        self.versions = Versions(spec.get("versions")).intersect(msg_versions)
        self.nullable = Versions(spec.get("nullableVersions")).intersect(self.versions)
        self.tagged = "tag" in spec
        self.tag = spec.get("tag")
        self.tagged_versions = Versions(spec.get("taggedVersions")).intersect(self.versions)
        self.flexible = Versions(spec["flexibleVersions"]) if "flexibleVersions" in spec else flexible
        d = spec.get("default")
        self.default = None if d is None else (str(d).lower() if isinstance(d, bool) else str(d))
        self.is_array = self.type.startswith("[]")
        self.elem = self.type[2:] if self.is_array else self.type
        self.is_struct = self.elem not in PRIMITIVES and self.elem not in ("string", "bytes", "records")
        self.sub_fields = spec.get("fields")
        # Option<T> whenever any version allows null.
        self.optional = not self.nullable.empty()

    # -- Rust types ---------------------------------------------------------

    def elem_type(self):
        if self.elem in PRIMITIVES:
            return PRIMITIVES[self.elem][0]
        if self.elem == "string":
            return STRING
        if self.elem in ("bytes", "records"):
            return BYTES
        return self.elem

    def rust_type(self):
        t = self.elem_type()
        if self.is_array:
            t = f"{VEC}<{t}>"
        return f"{OPT}<{t}>" if self.optional else t

    def default_value(self):
        d = self.default
        if self.optional and (d is None or d == "null"):
            return "None"
        if self.is_array:
            v = f"{VEC}::new()"
        elif self.is_struct:
            v = f"{self.elem}::default()"
        elif self.elem == "string":
            v = f"{STRING}::from({json.dumps(d or '')})"
        elif self.elem in ("bytes", "records"):
            v = f"{BYTES}::new()"
        elif self.elem == "bool":
            v = "true" if d == "true" else "false"
        elif self.elem == "float64":
            v = f"{float(d or 0)!r}_f64"
        elif self.elem == "uuid":
            v = "wire::Uuid::ZERO"
        else:
            n = int(d, 0) if d else 0
            rt = PRIMITIVES[self.elem][0]
            if self.elem == "int32" and n == -2147483648:
                v = "i32::MIN"
            elif self.elem == "int64" and n == 9223372036854775807:
                v = "i64::MAX"
            elif self.elem == "int32" and n == 0x7FFFFFFF:
                v = "i32::MAX"
            else:
                v = f"{n}_{rt}"
        return f"Some({v})" if self.optional else v


class Struct:
    def __init__(self, name, fields, msg_versions, flexible):
        self.name = name
        self.fields = [Field(f, msg_versions, flexible) for f in fields]
        self.msg_versions = msg_versions
        self.flexible = flexible


def collect_structs(top_name, spec, msg_versions, flexible):
    """All structs of a message: the top level, nested ones, common ones."""
    structs = [Struct(top_name, spec.get("fields", []), msg_versions, flexible)]
    common = {c["name"]: c for c in spec.get("commonStructs", [])}
    seen = {top_name}

    def walk(struct):
        for f in struct.fields:
            if not f.is_struct:
                continue
            if f.sub_fields is not None:
                sub = Struct(f.elem, f.sub_fields, msg_versions, flexible)
            elif f.elem in common:
                sub = Struct(f.elem, common[f.elem]["fields"], msg_versions, flexible)
            else:
                raise SystemExit(f"{top_name}: unknown struct type {f.elem}")
            if sub.name in seen:
                continue
            seen.add(sub.name)
            structs.append(sub)
            walk(sub)

    walk(structs[0])
    return structs


# -- decode -------------------------------------------------------------------

def flex_expr(f):
    """Whether compact encodings apply to this field, as a Rust expression."""
    if f.flexible is None or f.flexible.empty():
        return "false"
    return f.flexible.cond(within=None)


def decode_elem(f, flex, name):
    e = f.elem
    if e in PRIMITIVES:
        return {"wire::Uuid": "r.uuid()?"}.get(PRIMITIVES[e][0], f"r.{PRIMITIVES[e][0]}()?")
    if e == "string":
        return f"r.string({flex}, {json.dumps(name)})?"
    if e in ("bytes", "records"):
        return f"r.bytes_field({flex}, {json.dumps(name)})?"
    return f"{e}::decode(r, version)?"


def decode_field(f, s):
    """An expression of the field's Rust type decoded from `r`."""
    flex = flex_expr(f)
    qname = f"{s.name}.{f.name}"
    null_err = f"return Err(wire::DecodeError::NullNotAllowed({json.dumps(qname)}))"
    nullable_now = f.nullable.cond(within=f.versions)
    if f.is_array:
        inner = (f"{{ let mut v = wire::Reader::vec_for(n); for _ in 0..n {{ v.push({decode_elem(f, flex, qname)}); }} v }}")
        if f.optional:
            if nullable_now == "true":
                return f"match r.array_len({flex})? {{ None => None, Some(n) => Some({inner}) }}"
            return (f"match r.array_len({flex})? {{ None if {nullable_now} => None, None => {null_err}, "
                    f"Some(n) => Some({inner}) }}")
        return f"match r.array_len({flex})? {{ None => {null_err}, Some(n) => {inner} }}"
    if f.optional:
        if f.elem == "string":
            raw = f"r.nullable_string({flex})?"
        elif f.elem in ("bytes", "records"):
            raw = f"r.nullable_bytes({flex})?"
        elif f.is_struct:
            raw = f"if r.i8()? < 0 {{ None }} else {{ Some({f.elem}::decode(r, version)?) }}"
        else:
            raise SystemExit(f"nullable primitive {qname}")
        if nullable_now == "true":
            return raw
        return f"match {raw} {{ None if !({nullable_now}) => {null_err}, v => v }}"
    return decode_elem(f, flex, qname)


def gen_decode(s):
    out = []
    out.append("    pub fn decode(r: &mut wire::Reader, version: i16) -> "
               f"{RESULT}<Self, wire::DecodeError> {{")
    out.append("        let mut this = Self::default();")
    for f in s.fields:
        if f.tagged or f.versions.empty():
            continue
        cond = f.versions.cond(within=s.msg_versions)
        stmt = f"this.{f.ident} = {decode_field(f, s)};"
        out.append(f"        if {cond} {{ {stmt} }}" if cond != "true" else f"        {stmt}")
    flexible = s.flexible
    if flexible is not None and not flexible.empty():
        tagged = [f for f in s.fields if f.tagged and not f.tagged_versions.empty()]
        fc = flexible.cond(within=s.msg_versions)
        out.append(f"        if {fc} {{" if fc != "true" else "        {")
        if tagged:
            out.append("            let unknown = r.tagged_fields(|tag, r| {")
            out.append("                match tag {")
            for f in tagged:
                cond = f.tagged_versions.cond(within=s.msg_versions)
                guard = "" if cond == "true" else f" if {cond}"
                out.append(f"                    {f.tag}{guard} => {{ this.{f.ident} = {decode_field(f, s)}; Ok(true) }}")
            out.append("                    _ => Ok(false),")
            out.append("                }")
            out.append("            })?;")
        else:
            out.append("            let unknown = r.tagged_fields(|_, _| Ok(false))?;")
        out.append("            this.unknown_tagged_fields = unknown;")
        out.append("        }")
    out.append("        Ok(this)")
    out.append("    }")
    return out


# -- encode -------------------------------------------------------------------

def encode_elem(f, flex, name, v):
    """Statement writing one element `v` (a reference)."""
    e = f.elem
    if e in PRIMITIVES:
        t = PRIMITIVES[e][0]
        if t == "wire::Uuid":
            return f"w.uuid({v});"
        return f"w.{t}({v[1:]});" if v.startswith("&") else f"w.{t}(*{v});"
    if e == "string":
        return f"w.string({v}, {flex}, {json.dumps(name)})?;"
    if e in ("bytes", "records"):
        return f"w.bytes({v}, {flex}, {json.dumps(name)})?;"
    return f"{v.lstrip('&')}.encode(w, version)?;"


def encode_field(f, s):
    flex = flex_expr(f)
    qname = f"{s.name}.{f.name}"
    null_err = f"return Err(wire::EncodeError::NullNotAllowed({json.dumps(qname)}))"
    nullable_now = f.nullable.cond(within=f.versions)
    x = f"self.{f.ident}"
    if f.is_array:
        loop = f"for e in items {{ {encode_elem(f, flex, qname, 'e')} }}"
        if f.optional and nullable_now == "true":
            return (f"match &{x} {{ None => w.array_len(None, {flex}, {json.dumps(qname)})?, "
                    f"Some(items) => {{ w.array_len(Some(items.len()), {flex}, {json.dumps(qname)})?; {loop} }} }}")
        if f.optional:
            return (f"match &{x} {{ None if {nullable_now} => w.array_len(None, {flex}, {json.dumps(qname)})?, "
                    f"None => {null_err}, Some(items) => {{ w.array_len(Some(items.len()), {flex}, {json.dumps(qname)})?; {loop} }} }}")
        return f"{{ let items = &{x}; w.array_len(Some(items.len()), {flex}, {json.dumps(qname)})?; {loop} }}"
    if f.optional:
        if f.elem == "string":
            some = f"w.string(v, {flex}, {json.dumps(qname)})?"
            none = f"w.nullable_string(None, {flex}, {json.dumps(qname)})?"
        elif f.elem in ("bytes", "records"):
            some = f"w.bytes(v, {flex}, {json.dumps(qname)})?"
            none = f"w.nullable_bytes(None, {flex}, {json.dumps(qname)})?"
        else:
            some = "{ w.i8(1); v.encode(w, version)?; }"
            none = "w.i8(-1)"
        if nullable_now == "true":
            return f"match &{x} {{ Some(v) => {some}, None => {none} }}"
        return f"match &{x} {{ Some(v) => {some}, None if {nullable_now} => {none}, None => {null_err} }}"
    return encode_elem(f, flex, qname, f"&{x}")


def gen_encode(s):
    out = []
    out.append("    pub fn encode(&self, w: &mut wire::Writer<'_>, version: i16) -> "
               f"{RESULT}<(), wire::EncodeError> {{")
    for f in s.fields:
        if f.tagged or f.versions.empty():
            continue
        cond = f.versions.cond(within=s.msg_versions)
        stmt = encode_field(f, s)
        out.append(f"        if {cond} {{ {stmt} }}" if cond != "true" else f"        {stmt}")
    flexible = s.flexible
    if flexible is not None and not flexible.empty():
        tagged = [f for f in s.fields if f.tagged and not f.tagged_versions.empty()]
        fc = flexible.cond(within=s.msg_versions)
        out.append(f"        if {fc} {{" if fc != "true" else "        {")
        out.append(f"            let mut tagged: {VEC}<(u32, {BYTES})> = "
                   "self.unknown_tagged_fields.iter().map(|f| (f.tag, f.data.clone())).collect();")
        for f in tagged:
            cond = f.tagged_versions.cond(within=s.msg_versions)
            out.append(f"            if {cond} && self.{f.ident} != {f.default_value()} {{")
            out.append(f"                tagged.push(({f.tag}, wire::encode_tagged(|w| {{ {encode_field(f, s)}; Ok(()) }})?));")
            out.append("            }")
        out.append("            w.tagged_fields(tagged)?;")
        out.append("        }")
    out.append("        Ok(())")
    out.append("    }")
    return out


# -- sample (tests and fuzzing) ---------------------------------------------------

def sample_elem(f):
    e = f.elem
    if e in PRIMITIVES:
        return f"g.{e}()"
    if e == "string":
        return "g.string()"
    if e in ("bytes", "records"):
        return "g.bytes()"
    return f"{e}::sample(g, version)"


def sample_field(f):
    if f.is_array:
        v = f"(0..g.count()).map(|_| {sample_elem(f)}).collect()"
    else:
        v = sample_elem(f)
    if f.optional:
        nullable_now = f.nullable.cond(within=f.versions)
        if nullable_now == "true":
            return f"if g.null() {{ None }} else {{ Some({v}) }}"
        return f"if {nullable_now} && g.null() {{ None }} else {{ Some({v}) }}"
    return v


def gen_sample(s):
    out = ["    /// A random value with every field of `version` set.",
           "    pub fn sample(g: &mut super::Gen, version: i16) -> Self {",
           "        let mut this = Self::default();"]
    for f in s.fields:
        if f.versions.empty():
            continue
        vs = f.tagged_versions if f.tagged else f.versions
        cond = vs.cond(within=s.msg_versions)
        stmt = f"this.{f.ident} = {sample_field(f)};"
        out.append(f"        if {cond} {{ {stmt} }}" if cond != "true" else f"        {stmt}")
    out.append("        let _ = version;")
    out.append("        this")
    out.append("    }")
    return out


def gen_struct(s):
    out = ["#[derive(Debug, Clone, PartialEq)]", f"pub struct {s.name} {{"]
    for f in s.fields:
        if f.versions.empty():
            continue
        out.append(f"    pub {f.ident}: {f.rust_type()},")
    out.append(f"    pub unknown_tagged_fields: {VEC}<wire::RawTaggedField>,")
    out.append("}")
    out.append("")
    out.append(f"impl Default for {s.name} {{")
    out.append("    fn default() -> Self {")
    out.append("        Self {")
    for f in s.fields:
        if f.versions.empty():
            continue
        out.append(f"            {f.ident}: {f.default_value()},")
    out.append(f"            unknown_tagged_fields: {VEC}::new(),")
    out.append("        }")
    out.append("    }")
    out.append("}")
    out.append("")
    out.append(f"impl {s.name} {{")
    out += gen_decode(s)
    out.append("")
    out += gen_encode(s)
    out.append("")
    out.append('    #[cfg(any(test, feature = "sample"))]')
    out += gen_sample(s)
    out.append("}")
    out.append("")
    return out


def gen_message(spec, source_name):
    versions = Versions(spec["validVersions"])
    flexible = Versions(spec.get("flexibleVersions"))
    structs = collect_structs(spec["name"], spec, versions, flexible)
    out = [f"//! `{spec['name']}`: generated by scripts/codegen/generate.py from {source_name}.",
           "//! Do not edit; change the generator and re-run it.",
           "",
           "#![allow(clippy::all, unused_mut, unused_variables, unused_comparisons)]",
           "",
           "use crate::protocol::wire;",
           ""]
    if "apiKey" in spec:
        out.append(f"pub const API_KEY: i16 = {spec['apiKey']};")
    out.append(f"/// Lowest and highest version the schema defines.")
    out.append(f"pub const VERSIONS: (i16, i16) = ({versions.lo}, {versions.hi});")
    flex_from = "i16::MAX" if flexible.empty() else str(flexible.lo)
    out.append(f"/// First version that uses compact encodings and tagged fields.")
    out.append(f"pub const FLEXIBLE_FROM: i16 = {flex_from};")
    out.append("")
    for s in structs:
        out += gen_struct(s)
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description="Generate kaas's Kafka message codec.")
    parser.add_argument("schema_dir", nargs="?",
                        default=os.path.join(ROOT, "..", "shared", "kafka-messages"),
                        help="Kafka's JSON message schemas (default: ../shared/kafka-messages)")
    parser.add_argument("--out-dir", default=DEFAULT_OUT_DIR,
                        help="where to write the Rust modules (default: core/src/protocol/messages)")
    args = parser.parse_args()
    schema_dir = args.schema_dir
    out_dir = os.path.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    apis = []
    modules = []
    for name in API_NAMES:
        pair = []
        for kind in ("Request", "Response"):
            fname = f"{name}{kind}.json"
            spec = load(os.path.join(schema_dir, fname))
            mod = snake(spec["name"])
            with open(os.path.join(out_dir, f"{mod}.rs"), "w") as f:
                f.write(gen_message(spec, fname))
            modules.append(mod)
            pair.append(spec)
        req, _ = pair
        v = Versions(req["validVersions"])
        fl = Versions(req.get("flexibleVersions"))
        apis.append((name, req["apiKey"], v.lo, v.hi, "i16::MAX" if fl.empty() else fl.lo))
    for name in DATA_NAMES:
        fname = f"{name}.json"
        spec = load(os.path.join(schema_dir, fname))
        mod = snake(spec["name"])
        with open(os.path.join(out_dir, f"{mod}.rs"), "w") as f:
            f.write(gen_message(spec, fname))
        modules.append(mod)

    apis.sort(key=lambda a: a[1])
    out = ["//! The Kafka messages kaas decodes: generated by scripts/codegen/generate.py.",
           "//! Do not edit; change the generator and re-run it.",
           "",
           "use crate::protocol::wire;",
           "",
           '#[cfg(any(test, feature = "sample"))]',
           "pub use crate::protocol::sample::Gen;",
           ""]
    for m in sorted(modules):
        out.append(f"pub mod {m};")
    out.append("")
    for m in sorted(modules):
        out.append(f"pub use {m}::{''.join(p.capitalize() for p in m.split('_'))};")
    out.append("")
    out.append("/// Every API kaas can decode: (key, name, lowest, highest, first flexible version).")
    out.append("pub const APIS: &[(i16, &str, i16, i16, i16)] = &[")
    for name, key, lo, hi, flex in apis:
        out.append(f"    ({key}, {json.dumps(name)}, {lo}, {hi}, {flex}),")
    out.append("];")
    out.append("")
    for kind in ("Request", "Response"):
        out.append(f"/// A decoded {kind.lower()} body of any API.")
        out.append("#[derive(Debug, Clone, PartialEq)]")
        out.append(f"pub enum {kind}Body {{")
        for name, *_ in apis:
            out.append(f"    {name}({name}{kind}),")
        out.append("}")
        out.append("")
        out.append(f"impl {kind}Body {{")
        out.append("    /// Decodes a body of `api_key` at `version` (the version must be in the schema's range).")
        out.append("    pub fn decode(api_key: i16, version: i16, r: &mut wire::Reader) -> "
                   f"{RESULT}<Self, wire::DecodeError> {{")
        out.append("        let unsupported = wire::DecodeError::UnsupportedVersion { api_key, version };")
        out.append("        match api_key {")
        for name, key, lo, hi, _ in apis:
            m = snake(name + kind)
            out.append(f"            {m}::API_KEY => {{")
            out.append(f"                if !({m}::VERSIONS.0..={m}::VERSIONS.1).contains(&version) {{ return Err(unsupported); }}")
            out.append(f"                Ok(Self::{name}({name}{kind}::decode(r, version)?))")
            out.append("            }")
        out.append("            _ => Err(wire::DecodeError::UnknownApiKey(api_key)),")
        out.append("        }")
        out.append("    }")
        out.append("")
        out.append(f"    pub fn encode(&self, w: &mut wire::Writer<'_>, version: i16) -> {RESULT}<(), wire::EncodeError> {{")
        out.append("        match self {")
        for name, *_ in apis:
            out.append(f"            Self::{name}(m) => m.encode(w, version),")
        out.append("        }")
        out.append("    }")
        out.append("")
        out.append("    pub fn api_key(&self) -> i16 {")
        out.append("        match self {")
        for name, *_ in apis:
            out.append(f"            Self::{name}(_) => {snake(name + kind)}::API_KEY,")
        out.append("        }")
        out.append("    }")
        out.append("")
        out.append('    #[cfg(any(test, feature = "sample"))]')
        out.append("    /// A random body of `api_key` at `version`, or None for an unknown key.")
        out.append(f"    pub fn sample(g: &mut Gen, api_key: i16, version: i16) -> {OPT}<Self> {{")
        out.append("        match api_key {")
        for name, *_ in apis:
            out.append(f"            {snake(name + kind)}::API_KEY => Some(Self::{name}({name}{kind}::sample(g, version))),")
        out.append("            _ => None,")
        out.append("        }")
        out.append("    }")
        out.append("}")
        out.append("")
    with open(os.path.join(out_dir, "mod.rs"), "w") as f:
        f.write("\n".join(out))
    files = [os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.endswith(".rs")]
    subprocess.run(["rustfmt", "--edition", "2021"] + sorted(files), check=True)
    print(f"generated {len(modules)} messages into {os.path.relpath(out_dir, os.getcwd())}")


if __name__ == "__main__":
    main()
