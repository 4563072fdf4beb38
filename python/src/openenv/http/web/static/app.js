// The openenv playground: play an environment by hand over the server's own /ws protocol.
// Plain JavaScript, no framework, no network access beyond this server (works offline).
// Reads /schema and /openenv/info, builds the action form from the JSON Schema (enums as
// selects, numbers with their bounds, free JSON as a fallback), and speaks OpenEnv's frames
// with request ids ({"type": "reset"|"step"|"state"|"mcp"|"openenv.hello"|"openenv.render", "id"}).
"use strict";

const $ = (id) => document.getElementById(id);
const app = {
  ws: null, nextId: 1, pending: new Map(), info: null, schema: null, root: null,
  toolActions: false, tools: [], renderable: true, ret: 0, steps: 0, running: false,
  actionForm: null, toolForm: null,
};

// ------------------------------------------------------------------ small helpers

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

async function fetchJson(path) {
  const r = await fetch(new URL(path, location.href), { headers: { accept: "application/json" } });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function showError(msg) {
  const e = $("error");
  e.hidden = !msg;
  e.textContent = msg || "";
}

function fmtNum(x) {
  if (x === null || x === undefined) return "–";
  return Number.isInteger(x) ? String(x) : String(Math.round(x * 1e6) / 1e6);
}

// ------------------------------------------------------------------ JSON Schema forms

function resolve(s, root, depth = 0) {
  while (s && typeof s === "object" && typeof s.$ref === "string" && depth++ < 32) {
    const path = s.$ref.replace(/^#\//, "").split("/").map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
    let t = root;
    for (const p of path) t = t && t[p];
    s = t ? { ...t, ...Object.fromEntries(Object.entries(s).filter(([k]) => k !== "$ref")) } : {};
  }
  return s || {};
}

let fieldSeq = 0;

// A field: {node, get()} where get() returns the value (undefined: leave the key out).
function makeField(name, schema, root, required) {
  const s = resolve(schema, root);
  const id = `f${++fieldSeq}`;
  const title = s.title || name;
  const help = s.description ? el("div", { class: "hint", id: `${id}-hint`, text: s.description }) : null;
  const described = help ? `${id}-hint` : undefined;
  if ("const" in s) {
    return { node: null, get: () => s.const };
  }
  if (Array.isArray(s.enum)) {
    // Protobuf enums list names and numbers: offer the names.
    const named = s.enum.filter((v) => typeof v === "string");
    const choices = named.length ? named : s.enum;
    const sel = el("select", { id, name, "aria-describedby": described });
    if (!required) sel.append(el("option", { value: "", text: "(unset)" }));
    choices.forEach((v, i) => sel.append(el("option", { value: String(i), text: String(v) })));
    const dflt = "default" in s ? choices.indexOf(s.default) : -1;
    const firstReal = choices.findIndex((v) => !/_UNSPECIFIED$/.test(String(v)));
    sel.value = String(dflt >= 0 ? dflt : required ? Math.max(firstReal, 0) : "");
    if (!required && dflt < 0) sel.value = String(Math.max(firstReal, 0));
    return {
      node: el("div", {}, el("label", { for: id, text: title }), sel, help),
      get: () => (sel.value === "" ? undefined : choices[Number(sel.value)]),
      input: sel,
    };
  }
  const type = Array.isArray(s.type) ? s.type.find((t) => t !== "null") : s.type;
  if (type === "boolean") {
    const cb = el("input", { id, name, type: "checkbox", "aria-describedby": described });
    cb.checked = s.default === true;
    return { node: el("div", {}, el("label", { for: id }, cb, " ", title), help), get: () => cb.checked, input: cb };
  }
  if (type === "integer" || type === "number") {
    const attrs = { id, name, type: "number", step: type === "integer" ? "1" : "any", "aria-describedby": described };
    // Bounds worth showing (not the int32/int64 limits of every protobuf field).
    if (typeof s.minimum === "number" && Math.abs(s.minimum) < 2 ** 31 - 1) attrs.min = s.minimum;
    if (typeof s.maximum === "number" && Math.abs(s.maximum) < 2 ** 31 - 1) attrs.max = s.maximum;
    const inp = el("input", attrs);
    if (typeof s.default === "number") inp.value = String(s.default);
    const bounds = [attrs.min !== undefined ? `≥ ${attrs.min}` : "", attrs.max !== undefined ? `≤ ${attrs.max}` : ""].filter(Boolean).join(", ");
    const label = el("label", { for: id, text: bounds ? `${title} (${bounds})` : title });
    return {
      node: el("div", {}, label, inp, help),
      get: () => {
        if (inp.value === "") {
          if (required) throw new Error(`${title} is required`);
          return undefined;
        }
        const v = Number(inp.value);
        if (!inp.checkValidity()) throw new Error(`${title}: ${inp.validationMessage}`);
        return v;
      },
      input: inp,
    };
  }
  if (type === "string") {
    const long = (s.maxLength || 0) > 200 || /text|prompt|message|code|content/i.test(name);
    const inp = long ? el("textarea", { id, name, rows: 3, "aria-describedby": described }) : el("input", { id, name, type: "text", "aria-describedby": described });
    if (typeof s.default === "string") inp.value = s.default;
    return {
      node: el("div", {}, el("label", { for: id, text: title }), inp, help),
      get: () => (inp.value === "" && !required ? undefined : inp.value),
      input: inp,
    };
  }
  if ((type === "object" || (!type && s.properties)) && s.properties && Object.keys(s.properties).length) {
    const sub = objectForm(s, root);
    const fs = el("fieldset", {}, el("legend", { text: title }), sub.node, help);
    return { node: fs, get: sub.get, fill: sub.fill };
  }
  // Anything else (arrays, free objects, unions): JSON text.
  const ta = el("textarea", { id, name, rows: 3, spellcheck: "false", "aria-describedby": described });
  if ("default" in s) ta.value = JSON.stringify(s.default);
  return {
    node: el("div", {}, el("label", { for: id, text: `${title} (JSON)` }), ta, help),
    get: () => {
      if (ta.value.trim() === "") return undefined;
      try { return JSON.parse(ta.value); } catch (e) { throw new Error(`${title}: not JSON (${e.message})`); }
    },
    input: ta,
  };
}

function objectForm(schema, root) {
  const s = resolve(schema, root);
  const req = new Set(s.required || []);
  const fields = Object.entries(s.properties || {}).map(([k, v]) => [k, makeField(k, v, root, req.has(k))]);
  const node = el("div");
  for (const [, f] of fields) if (f.node) node.append(f.node);
  return {
    node,
    fields,
    get: () => {
      const out = {};
      for (const [k, f] of fields) {
        const v = f.get();
        if (v !== undefined) out[k] = v;
      }
      return out;
    },
  };
}

// The action form of the schema: an object form, a single field, or free JSON.
function buildActionForm(schema, root) {
  const s = resolve(schema, root);
  const box = $("action-fields");
  box.replaceChildren();
  if (s.properties && Object.keys(s.properties).length) {
    const f = objectForm(s, root);
    box.append(f.node);
    return f;
  }
  if (s.type || s.enum) {
    const f = makeField("action", s, root, true);
    if (f.node) box.append(f.node);
    return f;
  }
  $("raw-box").open = true;
  box.append(el("p", { class: "muted", text: "No schema for the action: type it as JSON below." }));
  return { get: () => { throw new Error("type the action as JSON"); } };
}

// Tools (MCP tools/list): a tool picker and a form of the chosen tool's input schema.
function buildToolForm(container, tools, onChange) {
  container.replaceChildren();
  const sel = el("select", { id: `${container.id}-name`, name: "tool" });
  tools.forEach((t, i) => sel.append(el("option", { value: String(i), text: t.name })));
  const desc = el("p", { class: "hint" });
  const argsBox = el("div");
  container.append(el("label", { for: sel.id, text: "Tool" }), sel, desc, argsBox);
  let args = null;
  const pick = () => {
    const t = tools[Number(sel.value)];
    desc.textContent = t.description || "";
    const schema = t.inputSchema || t.input_schema || {};
    args = objectForm(schema, schema);
    argsBox.replaceChildren(args.node);
    if (onChange) onChange();
  };
  sel.addEventListener("change", pick);
  pick();
  return { get: () => ({ name: tools[Number(sel.value)].name, arguments: args.get() }) };
}

// ------------------------------------------------------------------ rendering

function tree(value, depth = 0, key = null, openDepth = 2) {
  const keyNode = key === null ? null : el("span", { class: "k", text: `${key}: ` });
  if (value === null || typeof value !== "object") {
    const cls = value === null ? "z" : typeof value === "string" ? "s" : typeof value === "number" ? "n" : "b";
    const text = typeof value === "string" ? JSON.stringify(value.length > 2000 ? `${value.slice(0, 2000)}…` : value) : String(value);
    return el("div", {}, keyNode, el("span", { class: cls, text }));
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  const label = Array.isArray(value) ? `[${value.length}]` : `{${entries.length}}`;
  const d = el("details", {}, el("summary", {}, keyNode, el("span", { class: "z", text: label })));
  d.open = depth < openDepth;
  const ul = el("ul");
  for (const [k, v] of entries.slice(0, 500)) ul.append(el("li", {}, tree(v, depth + 1, k, openDepth)));
  if (entries.length > 500) ul.append(el("li", { class: "muted", text: `… ${entries.length - 500} more` }));
  d.append(ul);
  return d;
}

function setTree(id, value) {
  // Small values open fully; large ones (big grids, tensors) two levels deep.
  let small = false;
  try { small = JSON.stringify(value).length < 4000; } catch { /* cyclic: cannot happen for JSON */ }
  $(id).replaceChildren(value === undefined ? el("p", { class: "muted", text: "none" }) : tree(value, 0, null, small ? 8 : 2));
}

function breakdown(score) {
  const li = el("li", {},
    el("span", { text: `${score.name || "rubric"}: ` }),
    el("span", { class: "score", text: fmtNum(score.score ?? 0) }),
    score.weight !== undefined && score.weight !== 1 ? el("span", { class: "muted", text: ` × ${fmtNum(score.weight)}` }) : null,
    score.reason ? el("span", { class: "reason", text: ` — ${score.reason}` }) : null);
  if (Array.isArray(score.children) && score.children.length) {
    const ul = el("ul");
    for (const c of score.children) ul.append(breakdown(c));
    li.append(ul);
  }
  return li;
}

function rgbCanvas(width, height, channels, bytes, label) {
  const c = el("canvas", { width, height, role: "img", "aria-label": label });
  const ctx = c.getContext("2d");
  const img = ctx.createImageData(width, height);
  for (let i = 0, j = 0; i < width * height; i++, j += channels) {
    const grey = channels === 1;  // a grey frame: one value per pixel
    img.data[4 * i] = bytes[j];
    img.data[4 * i + 1] = grey ? bytes[j] : bytes[j + 1];
    img.data[4 * i + 2] = grey ? bytes[j] : bytes[j + 2];
    img.data[4 * i + 3] = channels === 4 ? bytes[j + 3] : 255;
  }
  ctx.putImageData(img, 0, 0);
  // Small frames (Atari-like) are scaled up for people, crisp (image-rendering: pixelated).
  const scale = Math.max(1, Math.floor(384 / Math.max(width, height)));
  c.style.width = `${width * scale}px`;
  return c;
}

function b64bytes(b64) {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

// A picture of a render reply: {"mime", "data", ...} (openenv.json_protocol.render).
function renderNode(r) {
  if (r.mime === "image/svg+xml") return el("img", { src: `data:image/svg+xml;charset=utf-8,${encodeURIComponent(r.data)}`, alt: "rendered state" });
  if (r.mime === "image/png") return el("img", { src: `data:image/png;base64,${r.data}`, alt: "rendered state" });
  if (r.mime === "image/x-raw-rgb") return rgbCanvas(r.width, r.height, r.channels, b64bytes(r.data), "rendered state");
  return el("pre", { text: String(r.data) });
}

// Whether the observation is one grey frame: a uint8 tensor of shape H×W or H×W×1 (an Atari
// screen in grey). Any other 2-D array (a grid, a board) is data, not a picture.
function greyFrameType(info) {
  const t = info && info.observation && info.observation.tensor;
  if (!t || t.dtype !== "D_TYPE_UINT8") return false;
  const shape = (t.shape || []).map(Number);
  return shape.length === 2 || (shape.length === 3 && shape[2] === 1);
}

// Pictures inside an observation: RGB(A) tensors (H×W×3|4 nested lists of 0..255, or uint8
// openenv.v1.Tensor fields of a typed observation), a grey frame when the observation type is
// one (greyFrameType), and MCP image blocks ({"mimeType": "image/…", "data": base64}).
function findImages(v, out = [], path = "observation", depth = 0) {
  if (out.length >= 4 || depth > 6 || v === null || typeof v !== "object") return out;
  if (depth === 0 && Array.isArray(v) && app.greyFrames && v.length > 1 && Array.isArray(v[0])) {
    const h = v.length, w = v[0].length, bytes = new Uint8ClampedArray(h * w);
    let ok = w > 1, k = 0;
    for (const r of v) {
      if (!ok || !Array.isArray(r) || r.length !== w) { ok = false; break; }
      for (const p of r) bytes[k++] = Array.isArray(p) ? p[0] : p;
    }
    if (ok) out.push({ path, node: rgbCanvas(w, h, 1, bytes, path) });
    return out;
  }
  if (Array.isArray(v)) {
    const h = v.length, row = v[0], px = Array.isArray(row) ? row[0] : null;
    if (h > 1 && Array.isArray(row) && row.length > 1 && Array.isArray(px) && (px.length === 3 || px.length === 4) && typeof px[0] === "number") {
      const w = row.length, ch = px.length, bytes = new Uint8ClampedArray(h * w * ch);
      let ok = true, k = 0;
      for (const r of v) { if (!Array.isArray(r) || r.length !== w) { ok = false; break; } for (const p of r) for (let c = 0; c < ch; c++) bytes[k++] = p[c]; }
      if (ok) out.push({ path, node: rgbCanvas(w, h, ch, bytes, path) });
      return out;
    }
    v.slice(0, 50).forEach((x, i) => findImages(x, out, `${path}[${i}]`, depth + 1));
    return out;
  }
  // An openenv.v1.Tensor field of a typed observation (proto3 JSON: shape as strings, base64 data).
  if (v.dtype === "D_TYPE_UINT8" && Array.isArray(v.shape) && v.shape.length === 3 && typeof v.data === "string") {
    const [h, w, ch] = v.shape.map(Number), bytes = b64bytes(v.data);
    if ((ch === 3 || ch === 4) && bytes.length === h * w * ch) out.push({ path, node: rgbCanvas(w, h, ch, bytes, path) });
    return out;
  }
  const mime = v.mimeType || v.mime_type;
  if (typeof mime === "string" && mime.startsWith("image/") && typeof v.data === "string") {
    out.push({ path, node: el("img", { src: `data:${mime};base64,${v.data}`, alt: path }) });
    return out;
  }
  for (const [k, x] of Object.entries(v)) findImages(x, out, `${path}.${k}`, depth + 1);
  return out;
}

async function refreshPicture(data) {
  const fig = $("picture"), body = $("picture-body");
  const nodes = [];
  if (app.renderable) {
    try {
      const r = await ask("openenv.render");
      nodes.push({ path: "render", node: renderNode(r) });
    } catch (e) {
      if (e.status === "UNIMPLEMENTED") app.renderable = false;
      else nodes.push({ path: "render", node: el("p", { class: "muted", text: `render failed: ${e.message}` }) });
    }
  }
  if (data && data.observation !== undefined) nodes.push(...findImages(data.observation));
  body.replaceChildren(...nodes.map((n) => n.node));
  $("picture-caption").textContent = nodes.map((n) => n.path).join(", ");
  fig.hidden = nodes.length === 0;
}

function showStep(data) {
  $("episode-id").textContent = data.episode_id || "–";
  $("step-count").textContent = String(data.step_count ?? 0);
  $("reward").textContent = fmtNum(data.reward);
  $("return").textContent = fmtNum(app.ret);
  $("terminated").textContent = String(!!data.terminated);
  $("truncated").textContent = String(!!data.truncated);
  setTree("observation", data.observation);
  setTree("metadata", data.metadata && Object.keys(data.metadata).length ? data.metadata : undefined);
  const bd = data.reward_breakdown;
  $("breakdown-box").hidden = !bd;
  $("breakdown").replaceChildren(bd ? el("ul", {}, breakdown(bd)) : "");
  app.running = !(data.terminated || data.truncated);
  $("step").disabled = !app.running && !(app.info && app.info.capabilities && app.info.capabilities.auto_reset);
  document.body.dataset.episode = app.running ? "running" : "over";
}

function addHistory(action, data) {
  const tr = el("tr", {},
    el("td", { text: String(data.step_count ?? "") }),
    el("td", { text: JSON.stringify(action) }),
    el("td", { text: fmtNum(data.reward) }),
    el("td", { text: fmtNum(app.ret) }),
    el("td", { text: data.terminated ? "terminated" : data.truncated ? "truncated" : "" }));
  $("history").tBodies[0].append(tr);
}

// ------------------------------------------------------------------ the /ws session

function setConn(text, cls) {
  const c = $("conn");
  c.textContent = text;
  c.className = cls || "";
}

function connect() {
  return new Promise((resolve, reject) => {
    const url = new URL("../ws", location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("client_name", "openenv-web");
    const ws = new WebSocket(url);
    app.ws = ws;
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error("cannot open the WebSocket"));
    ws.onmessage = (ev) => {
      let frame;
      try { frame = JSON.parse(ev.data); } catch { return; }
      const p = frame.id !== undefined ? app.pending.get(frame.id) : null;
      if (p) {
        app.pending.delete(frame.id);
        if (frame.type === "error") {
          const err = new Error(frame.data && frame.data.message ? frame.data.message : "error");
          err.status = frame.data && frame.data.status;
          p.reject(err);
        } else p.resolve(frame.data);
      } else if (frame.type === "error") {
        // The session ended on the server (idle timeout, shutdown, capacity).
        showError(`${frame.data.status || "error"}: ${frame.data.message}`);
      }
    };
    ws.onclose = (ev) => {
      for (const p of app.pending.values()) p.reject(new Error("the connection closed"));
      app.pending.clear();
      setConn(`disconnected (${ev.code}${ev.reason ? `: ${ev.reason}` : ""}); reload to start a new session`, "bad");
      $("step").disabled = true;
      $("reset").disabled = true;
    };
  });
}

function ask(type, data) {
  return new Promise((resolve, reject) => {
    if (!app.ws || app.ws.readyState !== WebSocket.OPEN) { reject(new Error("not connected")); return; }
    const id = app.nextId++;
    app.pending.set(id, { resolve, reject });
    const frame = { type, id };
    if (data !== undefined) frame.data = data;
    app.ws.send(JSON.stringify(frame));
  });
}

async function mcp(method, params) {
  const reply = await ask("mcp", { jsonrpc: "2.0", id: app.nextId, method, params: params || {} });
  if (reply.error) throw new Error(reply.error.message || "MCP error");
  return reply.result;
}

// ------------------------------------------------------------------ actions

function currentAction() {
  if ($("raw-box").open) {
    const text = $("raw-action").value.trim();
    try { return JSON.parse(text); } catch (e) { throw new Error(`the action is not JSON: ${e.message}`); }
  }
  if (app.toolActions) {
    const t = app.actionForm.get();
    return { type: "call_tool", tool_name: t.name, arguments: t.arguments };
  }
  return app.actionForm.get();
}

function syncRaw() {
  if ($("raw-box").open) return;
  try { $("raw-action").value = JSON.stringify(currentAction(), null, 1); } catch { /* incomplete form */ }
}

async function busy(fn) {
  showError("");
  document.body.setAttribute("aria-busy", "true");
  try { await fn(); } catch (e) { showError(e.status ? `${e.status}: ${e.message}` : e.message); } finally { document.body.removeAttribute("aria-busy"); }
}

async function onReset(ev) {
  ev.preventDefault();
  await busy(async () => {
    const data = {};
    const seed = $("seed").value.trim();
    if (seed !== "") {
      if (!/^\d+$/.test(seed)) throw new Error("the seed must be an integer ≥ 0");
      data.seed = Number(seed);
    }
    const opts = $("reset-options").value.trim();
    if (opts) {
      let o;
      try { o = JSON.parse(opts); } catch (e) { throw new Error(`options are not JSON: ${e.message}`); }
      if (!o || typeof o !== "object" || Array.isArray(o)) throw new Error("options must be a JSON object");
      Object.assign(data, o);
    }
    const r = await ask("reset", data);
    app.ret = 0;
    $("history").tBodies[0].replaceChildren();
    showStep(r);
    await refreshPicture(r);
  });
}

async function onStep(ev) {
  ev.preventDefault();
  await busy(async () => {
    const action = currentAction();
    const r = await ask("step", action);
    if (r.step_count === 0) { app.ret = 0; $("history").tBodies[0].replaceChildren(); } // auto-reset
    app.ret += r.reward || 0;
    showStep(r);
    if (r.step_count > 0) addHistory(action, r);
    await refreshPicture(r);
  });
}

async function onState() {
  await busy(async () => setTree("state", await ask("state")));
}

async function onCallTool(ev) {
  ev.preventDefault();
  await busy(async () => {
    const t = app.toolForm.get();
    setTree("state", { tool: t.name, result: await mcp("tools/call", { name: t.name, arguments: t.arguments }) });
  });
}

// ------------------------------------------------------------------ start

async function main() {
  const [schema, info] = await Promise.all([fetchJson("../schema"), fetchJson("../openenv/info")]);
  app.schema = schema;
  app.info = info;
  app.greyFrames = greyFrameType(info);
  document.title = `${info.name} · openenv playground`;
  $("env-name").textContent = info.name;
  $("env-version").textContent = info.version ? `v${info.version}` : "";
  $("env-description").textContent = info.description || "";
  await connect();
  const hello = await ask("openenv.hello");
  setConn(`connected: session ${hello.session_id} (protocol ${hello.protocol_version})`, "ok");
  const caps = info.capabilities || {};
  if (caps.tools) {
    try { app.tools = (await mcp("tools/list")).tools || []; } catch { app.tools = []; }
  }
  app.toolActions = schema.action && schema.action.title === "CallToolAction" && app.tools.length > 0;
  if (app.toolActions) {
    app.actionForm = buildToolForm($("action-fields"), app.tools, syncRaw);
  } else {
    app.actionForm = buildActionForm(schema.action || {}, schema.action || {});
    if (app.tools.length) {
      $("tool-form").hidden = false;
      app.toolForm = buildToolForm($("tool-fields"), app.tools);
      $("tool-form").addEventListener("submit", onCallTool);
    }
  }
  const examples = ((info.action || {}).examples || []).map((e) => e.message || e.json || e.value || e).filter((e) => e && typeof e === "object");
  if (examples.length) {
    $("examples-row").hidden = false;
    const sel = $("examples");
    sel.append(el("option", { value: "", text: "(pick one)" }));
    examples.forEach((ex, i) => {
      const clean = Object.fromEntries(Object.entries(ex).filter(([k]) => k !== "@type"));
      sel.append(el("option", { value: String(i), text: JSON.stringify(clean) }));
    });
    sel.addEventListener("change", () => {
      if (sel.value === "") return;
      const ex = examples[Number(sel.value)];
      const clean = Object.fromEntries(Object.entries(ex).filter(([k]) => k !== "@type"));
      $("raw-action").value = JSON.stringify(app.toolActions ? { type: "call_tool", tool_name: clean.name, arguments: clean.arguments || {} } : clean, null, 1);
      $("raw-box").open = true;
    });
  }
  $("action-form").addEventListener("input", syncRaw);
  $("action-form").addEventListener("change", syncRaw);
  syncRaw();
  $("reset-form").addEventListener("submit", onReset);
  $("action-form").addEventListener("submit", onStep);
  $("state-btn").addEventListener("click", onState);
  $("step").disabled = !caps.auto_reset;
  document.body.dataset.ready = "true";
  await refreshPicture(null);
}

main().catch((e) => { setConn(`failed: ${e.message}`, "bad"); showError(e.message); });
