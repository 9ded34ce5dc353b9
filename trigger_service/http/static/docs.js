// The API reference page: fetches /openapi.json (same origin, no token) and renders its
// operations, parameters, bodies, responses, webhooks and schemas. Every value is put into the
// page as a DOM text node (never parsed as HTML); the only markup is what this script builds.
"use strict";

const METHODS = ["get", "post", "put", "patch", "delete"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// A small Markdown subset for descriptions: paragraphs, "- " lists, `code`, **bold** and
// [links](https://...). Built from text nodes; a link is kept only for http(s) URLs.
function inline(text) {
  const out = [];
  const re = /`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    out.push(text.slice(last, m.index));
    if (m[1] !== undefined) out.push(el("code", {}, m[1]));
    else if (m[2] !== undefined) out.push(el("strong", {}, m[2]));
    else if (/^https?:\/\//.test(m[4])) out.push(el("a", { href: m[4], rel: "noreferrer" }, m[3]));
    else out.push(m[3]);
    last = re.lastIndex;
  }
  out.push(text.slice(last));
  return out;
}

function markdown(text) {
  const box = el("div", { class: "md" });
  if (!text) return box;
  for (const block of String(text).trim().split(/\n\s*\n/)) {
    const lines = block.split("\n");
    if (lines.every((l) => /^\s*- /.test(l) || /^\s{2,}\S/.test(l))) {
      const ul = el("ul");
      for (const item of block.split(/\n(?=\s*- )/)) {
        ul.append(el("li", {}, inline(item.replace(/^\s*- /, "").replace(/\s*\n\s*/g, " "))));
      }
      box.append(ul);
    } else {
      box.append(el("p", {}, inline(block.replace(/\s*\n\s*/g, " "))));
    }
  }
  return box;
}

// A path that may wrap after each "/" (never inside a name).
function breakable(path) {
  return path.split("/").flatMap((part, i) => (i === 0 ? [part] : [el("wbr"), "/" + part]));
}

function refName(ref) {
  return ref.split("/").pop();
}

function resolve(spec, obj) {
  let seen = 0;
  while (obj && obj.$ref && seen++ < 20) {
    const parts = obj.$ref.replace(/^#\//, "").split("/");
    obj = parts.reduce((o, p) => (o ? o[p] : undefined), spec);
  }
  return obj || {};
}

function schemaLink(ref) {
  const name = refName(ref);
  return el("a", { href: "#schema-" + name, class: "ref" }, name);
}

// A one-line summary of a schema's type: "string", "Trigger", "array of Instant", "A | null".
function typeOf(schema) {
  if (!schema || typeof schema !== "object") return [schema === true ? "any" : "never"];
  if (schema.$ref) return [schemaLink(schema.$ref)];
  for (const key of ["oneOf", "anyOf"]) {
    if (Array.isArray(schema[key]) && schema[key].every((s) => s.$ref || s.type)) {
      return schema[key].map(typeOf).reduce((a, b) => [...a, " | ", ...b]);
    }
  }
  if ("const" in schema) return [el("code", {}, JSON.stringify(schema.const))];
  const types = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  if (types.includes("array") && schema.items) {
    const rest = types.filter((t) => t !== "array");
    return ["array of ", ...typeOf(schema.items), ...rest.map((t) => " | " + t)];
  }
  if (types.length) return [types.join(" | ")];
  if (schema.allOf) return ["object"];
  return ["any JSON"];
}

// Constraints worth a reader's eye, as short text.
function constraints(schema) {
  const out = [];
  if (!schema || typeof schema !== "object") return out;
  if (schema.enum) out.push("one of " + schema.enum.map((v) => JSON.stringify(v)).join(", "));
  if (schema.format) out.push(schema.format);
  if (schema.minimum !== undefined) out.push("≥ " + schema.minimum);
  if (schema.maximum !== undefined) out.push("≤ " + schema.maximum);
  if (schema.minLength !== undefined) out.push("length ≥ " + schema.minLength);
  if (schema.maxLength !== undefined) out.push("length ≤ " + schema.maxLength);
  if (schema.minItems !== undefined) out.push(schema.minItems + "+ items");
  if (schema.maxItems !== undefined) out.push("at most " + schema.maxItems + " items");
  if (schema.pattern) out.push("pattern " + schema.pattern);
  if (schema.default !== undefined) out.push("default " + JSON.stringify(schema.default));
  return out;
}

function propertyRows(spec, schema, required) {
  const rows = [];
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    const described = prop && prop.$ref ? resolve(spec, prop) : prop || {};
    const notes = constraints(prop && prop.$ref ? {} : prop);
    rows.push(el("tr", {},
      el("td", {}, el("code", {}, name), required.has(name) ? el("span", { class: "req" }, " required") : null),
      el("td", { class: "type" }, typeOf(prop)),
      el("td", {}, markdown((prop && prop.description) || described.description || ""),
        notes.length ? el("div", { class: "notes" }, notes.join(" · ")) : null)));
  }
  return rows;
}

// One member of an allOf/oneOf/anyOf: a link, "has <fields>", or a nested choice.
function part(s) {
  if (s.$ref) return [schemaLink(s.$ref)];
  for (const key of ["oneOf", "anyOf"]) {
    if (Array.isArray(s[key])) {
      const label = key === "oneOf" ? "exactly one of: " : "at least one of: ";
      return [label, ...s[key].map(part).reduce((a, b) => [...a, " | ", ...b])];
    }
  }
  if (s.required && !s.properties) return ["has ", s.required.map((r) => el("code", {}, r)).reduce((a, b) => [a, ", ", b])];
  return typeOf(s);
}

// A schema in full: its description, composition, properties and constraints.
function schemaView(spec, schema) {
  const box = el("div", { class: "schema" });
  if (!schema) return box;
  if (schema.$ref) {
    box.append(el("p", {}, "Schema: ", schemaLink(schema.$ref)));
    return box;
  }
  if (schema.description) box.append(markdown(schema.description));
  for (const key of ["allOf", "oneOf", "anyOf"]) {
    if (!Array.isArray(schema[key])) continue;
    const label = { allOf: "All of", oneOf: "Exactly one of", anyOf: "At least one of" }[key];
    const items = schema[key].map((s) => el("li", {}, part(s)));
    box.append(el("div", { class: "compose" }, label + ":", el("ul", {}, items)));
  }
  if (schema.not && schema.not.required) {
    box.append(el("p", { class: "notes" }, "Not together: ",
      schema.not.required.map((r) => el("code", {}, r)).reduce((a, b) => [a, ", ", b])));
  }
  if (schema.dependentRequired) {
    for (const [k, v] of Object.entries(schema.dependentRequired)) {
      box.append(el("p", { class: "notes" }, el("code", {}, k), " needs ",
        v.map((r) => el("code", {}, r))));
    }
  }
  const required = new Set(schema.required || []);
  if (schema.properties) {
    box.append(el("table", { class: "props" },
      el("thead", {}, el("tr", {}, el("th", {}, "Field"), el("th", {}, "Type"), el("th", {}, "Description"))),
      el("tbody", {}, propertyRows(spec, schema, required))));
  } else if (!schema.allOf && !schema.oneOf && !schema.anyOf) {
    const notes = constraints(schema);
    box.append(el("p", { class: "type" }, "Type: ", typeOf(schema),
      notes.length ? el("span", { class: "notes" }, " · " + notes.join(" · ")) : null));
  }
  if (schema.additionalProperties === false || schema.unevaluatedProperties === false) {
    box.append(el("p", { class: "notes" }, "No other fields."));
  } else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
    box.append(el("p", { class: "notes" }, "Any key → ", typeOf(schema.additionalProperties)));
  }
  if (schema.example !== undefined) box.append(example(schema.example));
  return box;
}

function example(value, title) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return el("div", { class: "example" }, el("div", { class: "label" }, title || "Example"),
    el("pre", {}, text));
}

function parameterTable(spec, params) {
  if (!params.length) return null;
  return el("table", { class: "props" },
    el("thead", {}, el("tr", {}, el("th", {}, "Parameter"), el("th", {}, "In"),
      el("th", {}, "Type"), el("th", {}, "Description"))),
    el("tbody", {}, params.map((raw) => {
      const p = resolve(spec, raw);
      const notes = constraints(p.schema && !p.schema.$ref ? p.schema : resolve(spec, p.schema));
      return el("tr", {},
        el("td", {}, el("code", {}, p.name), p.required ? el("span", { class: "req" }, " required") : null),
        el("td", { class: "nowrap" }, p.in),
        el("td", { class: "type nowrap" }, typeOf(p.schema)),
        el("td", {}, markdown(p.description || ""),
          notes.length ? el("div", { class: "notes" }, notes.join(" · ")) : null));
    })));
}

function contentView(spec, content) {
  return Object.entries(content || {}).map(([type, media]) => el("div", { class: "media" },
    el("div", { class: "label" }, type),
    schemaView(spec, media.schema),
    media.example !== undefined ? example(media.example) : null,
    Object.entries(media.examples || {}).map(([name, ex]) => example(resolve(spec, ex).value,
      "Example: " + (resolve(spec, ex).summary || name)))));
}

function responsesView(spec, responses) {
  return el("div", { class: "responses" }, Object.entries(responses || {}).map(([code, raw]) => {
    const r = resolve(spec, raw);
    const kind = /^2/.test(code) ? "ok" : /^[45]/.test(code) ? "bad" : "other";
    const headers = Object.entries(r.headers || {}).map(([name, h]) => {
      const header = resolve(spec, h);
      return el("li", {}, el("code", {}, name), " — ", inline(header.description || ""));
    });
    return el("details", { class: "response " + kind, open: /^2/.test(code) },
      el("summary", {}, el("span", { class: "status" }, code), " ",
        inline((r.description || "").trim().replace(/\s*\n\s*/g, " "))),
      headers.length ? el("div", {}, el("div", { class: "label" }, "Headers"), el("ul", {}, headers)) : null,
      contentView(spec, r.content));
  }));
}

function operationView(spec, path, method, op, pathParams, anchor) {
  const secured = (op.security || spec.security || []).length > 0;
  const params = [...(pathParams || []), ...(op.parameters || [])];
  const body = op.requestBody ? resolve(spec, op.requestBody) : null;
  return el("section", { class: "op", id: anchor },
    el("h3", {}, el("span", { class: "method m-" + method }, method.toUpperCase()), " ",
      el("code", { class: "path" }, path)),
    el("p", { class: "summary" }, op.summary || "",
      el("span", { class: secured ? "auth" : "auth open" }, secured ? "bearer token" : "no token")),
    markdown(op.description),
    params.length ? el("h4", {}, "Parameters") : null,
    parameterTable(spec, params),
    body ? el("h4", {}, "Request body", body.required ? "" : " (optional)") : null,
    body ? contentView(spec, body.content) : null,
    el("h4", {}, "Responses"),
    responsesView(spec, op.responses));
}

function operations(spec) {
  const out = [];
  for (const [path, item] of Object.entries(spec.paths || {})) {
    for (const method of METHODS) {
      if (!item[method]) continue;
      const op = item[method];
      out.push({ path, method, op, params: item.parameters || [],
        tag: (op.tags || ["other"])[0], anchor: "op-" + (op.operationId || method + path) });
    }
  }
  return out;
}

function render(spec) {
  document.getElementById("title").textContent = (spec.info.title || "API") + " — API reference";
  document.getElementById("version").textContent = "v" + spec.info.version + " · OpenAPI " + spec.openapi;
  const intro = document.getElementById("intro");
  intro.append(el("h2", {}, spec.info.summary || "Overview"), markdown(spec.info.description));
  intro.hidden = false;

  const ops = operations(spec);
  const nav = document.getElementById("nav-list");
  const main = document.getElementById("operations");
  for (const tag of spec.tags || []) {
    const mine = ops.filter((o) => o.tag === tag.name);
    if (!mine.length) continue;
    main.append(el("h2", { class: "tag", id: "tag-" + tag.name }, tag.name),
      markdown(tag.description));
    const list = el("ul");
    for (const o of mine) {
      main.append(operationView(spec, o.path, o.method, o.op, o.params, o.anchor));
      list.append(el("li", { "data-search": (o.method + " " + o.path + " " + (o.op.summary || "") + " " + tag.name).toLowerCase() },
        el("a", { href: "#" + o.anchor }, el("span", { class: "method m-" + o.method }, o.method.toUpperCase()),
          el("span", {}, breakable(o.path)))));
    }
    nav.append(el("div", { class: "nav-group" }, el("a", { href: "#tag-" + tag.name, class: "nav-tag" }, tag.name), list));
  }

  const hooks = Object.entries(spec.webhooks || {});
  if (hooks.length) {
    const box = document.getElementById("webhooks");
    box.append(el("h2", { class: "tag", id: "tag-webhooks" }, "webhooks"),
      markdown("What this service sends to **your** endpoints."));
    const list = el("ul");
    for (const [name, item] of hooks) {
      for (const method of METHODS) {
        if (!item[method]) continue;
        box.append(operationView(spec, "{" + name + "}", method, item[method], [], "hook-" + name));
        list.append(el("li", { "data-search": ("webhook " + name).toLowerCase() },
          el("a", { href: "#hook-" + name }, el("span", { class: "method m-" + method }, method.toUpperCase()), " ", name)));
      }
    }
    box.hidden = false;
    nav.append(el("div", { class: "nav-group" }, el("a", { href: "#tag-webhooks", class: "nav-tag" }, "webhooks"), list));
  }

  const schemas = Object.entries((spec.components || {}).schemas || {});
  const box = document.getElementById("schemas");
  box.append(el("h2", { class: "tag", id: "tag-schemas" }, "schemas"));
  const list = el("ul");
  for (const [name, schema] of schemas) {
    box.append(el("section", { class: "op schema-def", id: "schema-" + name }, el("h3", {}, el("code", {}, name)),
      schemaView(spec, schema)));
    list.append(el("li", { "data-search": ("schema " + name).toLowerCase() }, el("a", { href: "#schema-" + name }, name)));
  }
  box.hidden = false;
  nav.append(el("div", { class: "nav-group" }, el("a", { href: "#tag-schemas", class: "nav-tag" }, "schemas"), list));

  document.getElementById("filter").addEventListener("input", (e) => {
    const q = e.target.value.trim().toLowerCase();
    for (const li of nav.querySelectorAll("li[data-search]")) {
      li.hidden = q !== "" && !li.getAttribute("data-search").includes(q);
    }
  });
  if (location.hash) {
    const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target) target.scrollIntoView();
  }
}

async function main() {
  const loading = document.getElementById("loading");
  try {
    const resp = await fetch("/openapi.json", { headers: { Accept: "application/json" } });
    if (!resp.ok) throw new Error("GET /openapi.json answered " + resp.status);
    render(await resp.json());
    document.body.setAttribute("data-ready", "true");
  } catch (e) {
    const failed = document.getElementById("failed");
    failed.textContent = "Could not load the API description: " + e.message;
    failed.hidden = false;
  } finally {
    loading.hidden = true;
  }
}

main();
