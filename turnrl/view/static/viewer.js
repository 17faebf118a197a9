// turnrl view: the episode list with filters, one episode (or two side by side) as conversation or tokens.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const state = { offset: 0, total: 0, rows: [], selected: null, compare: null, tab: "chat", info: null, cache: new Map() };
const PAGE = 200;

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d).replace(/\.?0+$/, "") || "0");
async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

// ---- list and filters ----

function filterParams() {
  const p = new URLSearchParams();
  for (const el of $("#filters").elements) if (el.name && el.value !== "") p.set(el.name, el.value);
  return p;
}

async function loadList(append = false) {
  if (!append) state.offset = 0;
  const p = filterParams();
  p.set("offset", state.offset);
  p.set("limit", PAGE);
  const res = await getJSON("/api/episodes?" + p);
  state.rows = append ? state.rows.concat(res.rows) : res.rows;
  state.total = res.total;
  renderList(res, append);
}

function renderList(res, append) {
  const body = $("#episodes tbody");
  const html = res.rows.map(r => `<tr data-index="${r.index}" class="${r.index === state.selected ? "selected" : ""}"
      title="${esc(r.source)} · ${esc(r.env_id)}${r.group_id !== null ? " · group " + esc(r.group_id) : ""}\n${esc(r.preview)}">
    <td>${r.index}</td><td class="run">${esc(r.run)}</td><td>${r.step ?? ""}</td><td class="task">${esc(r.task_id ?? r.id)}</td><td>${fmt(r.reward)}</td>
    <td><span class="badge ${r.outcome}">${r.outcome}</span></td><td>${r.turns}</td><td>${r.tool_calls}</td></tr>`).join("");
  if (append) body.insertAdjacentHTML("beforeend", html); else body.innerHTML = html;
  $("#count").textContent = `${res.total.toLocaleString()} episode${res.total === 1 ? "" : "s"} match` +
    (res.done ? "" : ` (indexing: ${res.indexed.toLocaleString()} so far)`);
  $("#more").hidden = state.rows.length >= res.total;
}

function fillSelect(sel, values, label = v => v) {
  const keep = sel.value;
  const first = sel.options[0].outerHTML;
  sel.innerHTML = first + values.map(v => `<option value="${esc(v)}">${esc(label(v))}</option>`).join("");
  sel.value = keep;
}

async function refreshInfo() {
  const info = await getJSON("/api/info");
  state.info = info;
  $("#path").textContent = info.path;
  const f = info.facets;
  fillSelect($("#f-run"), f.runs);
  fillSelect($("#f-env"), f.env_ids);
  fillSelect($("#f-member"), f.members);
  $("#f-member").parentElement.hidden = !f.members.length;
  fillSelect($("#f-kind"), f.kinds);
  fillSelect($("#f-step"), f.steps);
  const o = f.outcomes;
  $("#status").textContent = `${info.indexed.toLocaleString()} episodes (${o.correct} correct, ${o.wrong} wrong, ${o.error} errors)` +
    (info.done ? ` · indexed in ${info.seconds}s` : " · indexing…") +
    (info.error ? ` · index error: ${info.error}` : "") +
    ` · tokenizer: ${info.tokenizer ?? "none (token ids only; --tokenizer)"}`;
  return info;
}

async function poll() {  // while the index grows, keep the counts and the list fresh
  const info = await refreshInfo();
  await loadList();
  if (!info.done) setTimeout(poll, 500);
}

// ---- one episode ----

async function episode(i) {
  if (!state.cache.has(i)) state.cache.set(i, await getJSON(`/api/episode/${i}`));
  return state.cache.get(i);
}

async function show() {
  const panes = $("#panes");
  if (state.selected === null) return;
  location.hash = `e=${state.selected}` + (state.compare !== null ? `&c=${state.compare}` : "") + `&tab=${state.tab}`;
  for (const tr of document.querySelectorAll("#episodes tbody tr"))
    tr.classList.toggle("selected", Number(tr.dataset.index) === state.selected);
  $("#toolbar").hidden = false;
  for (const b of document.querySelectorAll("#toolbar .tabs button")) b.classList.toggle("active", b.dataset.tab === state.tab);
  const ids = state.compare !== null ? [state.selected, state.compare] : [state.selected];
  const eps = await Promise.all(ids.map(episode));
  const group = await getJSON(`/api/group/${state.selected}`);
  const games = state.tab === "game" ? await Promise.all(ids.map(i => getJSON(`/api/game/${i}`))) : [];
  const trees = state.tab === "tree" ? await Promise.all(ids.map(i => getJSON(`/api/tree/${i}`))) : [];
  panes.classList.toggle("compare", eps.length === 2);
  panes.innerHTML = eps.map((ep, k) => paneHTML(ep, k, k === 0 ? group.rows : null, games[k], trees[k])).join("");
  for (const a of panes.querySelectorAll("a.seat-view"))
    a.addEventListener("click", e => { e.preventDefault(); state.selected = Number(a.dataset.index); state.tab = "chat"; show(); });
  for (const a of panes.querySelectorAll("a.leaf-view"))
    a.addEventListener("click", e => { e.preventDefault(); state.selected = Number(a.dataset.index); show(); });
  const sel = $("select.compare", panes);
  if (sel) sel.addEventListener("change", () => { state.compare = sel.value === "" ? null : Number(sel.value); show(); });
  const closer = $("button.close-compare", panes);
  if (closer) closer.addEventListener("click", () => { state.compare = null; show(); });
  renderLegend();
}

function paneHTML(ep, k, group, game, tree) {
  const r = ep.row;
  let compare = "";
  if (group && group.length > 1) {
    const others = group.filter(g => g.index !== r.index);
    compare = `<label>compare with <select class="compare"><option value="">— group ${esc(ep.group_id)} (${group.length}) —</option>` +
      others.map(g => `<option value="${g.index}" ${g.index === state.compare ? "selected" : ""}>#${g.index} reward ${fmt(g.reward)} ${g.outcome}</option>`).join("") +
      `</select></label>`;
  }
  if (k === 1) compare = `<button type="button" class="close-compare">close</button>`;
  const facts = [
    `#${r.index}`, `run ${esc(r.run)}`, ep.env_id, r.kind + (r.step !== null ? ` step ${r.step}` : ""), `reward ${fmt(r.reward)}`,
    `<span class="badge ${r.outcome}">${r.outcome}</span>`, `${r.turns} turns`, `${r.tool_calls} tool calls`,
    ep.tokens ? `${ep.tokens.ids.length} tokens (${r.trained_tokens} trained)` : "no tokens",
  ];
  if (ep.contexts && ep.contexts.length) facts.push(`${ep.contexts.length + 1} contexts (history rewritten)`);
  const notes = ep.notes.concat(ep.error ? [`error: ${ep.error}`] : []);
  return `<section class="pane" data-index="${r.index}">
    <h2>${esc(ep.task_id ?? ep.id)} ${compare}</h2>
    <div class="facts">${facts.map(f => `<span>${f}</span>`).join("")}</div>
    ${notes.length ? `<div class="notes">${notes.map(esc).join("<br>")}</div>` : ""}
    ${state.tab === "chat" ? chatHTML(ep) : state.tab === "game" ? gameHTML(ep, game)
      : state.tab === "tree" ? treeHTML(ep, tree) : tokensHTML(ep)}
  </section>`;
}

function gameHTML(ep, game) {  // a game with several agents: the seats, then every move in the order played
  if (!game || !ep.row.seat) return `<div class="notes">one agent's episode: no game to show (see Conversation)</div>`;
  const seats = game.seats.map(s => `<a href="#" class="seat-view" data-index="${s.index}">${esc(s.seat)}` +
    `${s.policy ? " (" + esc(s.policy) + ")" : ""}: <span class="badge ${esc(s.outcome)}">${esc(s.outcome)}</span>` +
    ` reward ${fmt(s.reward)}</a>`).join(" · ");
  let html = `<div class="facts">seats' own views: ${seats}</div><div class="chat">`;
  for (const m of game.moves) {
    const bits = [`move ${m.move ?? "?"}`, esc(m.seat), `<span class="reward">reward ${fmt(m.reward)}</span>`];
    html += `<div class="turnhead">${bits.join(" · ")}</div>` + msgHTML({role: "assistant", name: m.seat, content: m.action});
    html += m.told.map(t => msgHTML({...t, name: `to ${m.seat}`})).join("");
  }
  return html + `</div>`;
}

function treeHTML(ep, tree) {  // a tree rollout: every node once, its edge's turns, its leaves' mean reward
  if (!tree || tree.nodes.length < 2) return `<div class="notes">a chain, not a tree rollout's leaf: no tree to show</div>`;
  const children = new Map(), byId = new Map(tree.nodes.map(n => [n.id, n]));
  for (const n of tree.nodes) if (n.parent !== null) children.set(n.parent, [...(children.get(n.parent) || []), n.id]);
  const mine = ep.row.index;
  const render = id => {
    const n = byId.get(id), kids = children.get(id) || [], onPath = n.leaves.includes(mine);
    const leaf = kids.length === 0 ? ` · <a href="#" class="leaf-view" data-index="${n.leaves[0]}">episode #${n.leaves[0]}</a>` : "";
    let html = `<div class="tree-node${onPath ? " on-path" : ""}" data-node="${esc(id)}" style="margin-left:${n.depth * 1.5}em">` +
      `<div class="turnhead">${esc(id)} · ${n.leaves.length} leaves · mean reward ${fmt(n.value)}${leaf}</div>`;
    for (const t of n.turns)
      html += msgHTML({role: "assistant", name: `turn ${t.turn}`, content: t.action}) + t.told.map(msgHTML).join("");
    return html + `</div>` + kids.map(render).join("");
  };
  return `<div class="chat tree">` + tree.nodes.filter(n => n.parent === null).map(n => render(n.id)).join("") + `</div>`;
}

function msgHTML(m) {
  const who = m.role + (m.name ? `: ${m.name}` : "");
  return `<div class="msg ${esc(m.role)}"><div class="who">${esc(who)}</div><pre>${esc(m.content)}</pre></div>`;
}

function dividerHTML(c) {  // where the episode's history was rewritten: a new context segment begins
  return `<div class="segment-divider" data-segment="${c.index}"><span>new context ${c.index + 1}: ${esc(c.reason)}</span></div>`;
}

function chatHTML(ep) {
  let html = `<div class="chat">` + ep.prompt.map(msgHTML).join("");
  const contexts = ep.contexts || [];
  let seg = 0;
  for (const t of ep.turns) {
    for (const c of contexts) if (c.index > seg && c.index <= (t.segment ?? 0)) html += dividerHTML(c);
    seg = Math.max(seg, t.segment ?? 0);
    const info = t.info || {};
    const bits = [`turn ${t.index}`, t.role, `<span class="reward">reward ${fmt(t.reward)}</span>`];
    if (info.correct !== undefined && info.correct !== null) bits.push(info.correct ? "correct" : "wrong");
    if (info.reward_source === "judge") {
      const rule = info.rule_correct === null || info.rule_correct === undefined ? "" : `, rule: ${info.rule_correct ? "correct" : "wrong"}`;
      bits.push(`judge: ${esc(info.judge_label ?? "unreadable")}${rule}`);
    }
    if (info.finish_reason) bits.push(`finish: ${esc(info.finish_reason)}`);
    if (t.terminated) bits.push("terminated");
    if (t.truncated) bits.push("truncated");
    if (info.error) bits.push(`error: ${esc(info.error)}`);
    html += `<div class="turnhead">${bits.join(" · ")}</div>` + msgHTML(t.action);
    html += t.tool_calls.map(c => `<div class="toolcall">tool call → ${esc(c.name)}(${esc(JSON.stringify(c.arguments && Object.keys(c.arguments).length ? c.arguments : c.raw ?? {}))})</div>`).join("");
    html += t.observation.map(msgHTML).join("");
  }
  return html + `</div>`;
}

// ---- tokens ----

function shown(text) {
  return text.replace(/\n/g, "↵\n").replace(/\t/g, "→\t");
}

function tokenColor(mode, tk, i, scale) {
  if (tk.mask[i] !== 1) return "";
  if (mode === "logprob" && tk.logp[i] !== null) {
    const p = Math.exp(tk.logp[i]);
    return `background: hsl(0, 85%, ${Math.round(55 + 40 * p)}%)`;
  }
  if (mode === "advantage" && tk.adv && tk.adv[i] !== null) {
    const x = tk.adv[i] / (scale.adv || 1);
    const a = (0.15 + 0.7 * Math.min(Math.abs(x), 1)).toFixed(2);
    return x >= 0 ? `background: rgba(22,163,74,${a})` : `background: rgba(220,38,38,${a})`;
  }
  if (mode === "drift" && tk.learner && tk.learner[i] !== null && tk.logp[i] !== null) {
    const d = Math.abs(tk.learner[i] - tk.logp[i]);
    return `background: rgba(147,51,234,${Math.min(0.05 + d / 0.5, 1).toFixed(2)})`;
  }
  return "";
}

function tokensHTML(ep) {
  const tk = ep.tokens;
  if (!tk) return `<p class="hint">This episode has no token fields (it was not produced by a token-level rollout).</p>`;
  const mode = $("#color-mode").value;
  const thr = Math.log(Math.max(Number($("#lowp").value) || 0, 1e-12));
  const scale = { adv: tk.adv ? Math.max(...tk.adv.map(a => Math.abs(a ?? 0)), 1e-9) : 1 };
  const out = [];
  const starts = new Map((ep.contexts || []).filter(c => c.start !== null).map(c => [c.start, c]));
  let turn = null;
  for (let i = 0; i < tk.ids.length; i++) {
    if (starts.has(i)) out.push(`<span class="segmark" data-segment="${starts.get(i).index}">\n── new context ${starts.get(i).index + 1}: ${esc(starts.get(i).reason)} ──\n</span>`);
    if (tk.segment[i] === "gen" && tk.turn[i] !== turn) {
      turn = tk.turn[i];
      out.push(`<span class="turnmark">[turn ${turn}] </span>`);
    }
    const gen = tk.mask[i] === 1;
    const low = gen && tk.logp[i] !== null && tk.logp[i] < thr;
    const text = tk.text ? tk.text[i] : `[${tk.ids[i]}]`;
    const style = tokenColor(mode, tk, i, scale);
    out.push(`<span class="tok ${gen ? "gen" : "ctx"}${low ? " lowp" : ""}" data-i="${i}"${style ? ` style="${style}"` : ""}>${esc(shown(text))}</span>`);
  }
  const missing = [];
  if (mode === "advantage" && !tk.adv) missing.push("this episode has no per-token advantages (metadata.advantages)");
  if (mode === "drift" && !tk.learner) missing.push("this episode has no learner logprobs (metadata.learner_logprobs)");
  return (missing.length ? `<p class="notes">${missing.join("; ")}</p>` : "") + `<div class="tokens">${out.join("")}</div>`;
}

function renderLegend() {
  const mode = $("#color-mode").value;
  const legends = {
    trained: `<span class="tok gen">generated (trained, mask 1)</span> <span class="tok ctx">prompt / template / environment (not trained)</span> <span class="tok gen lowp">low probability</span>`,
    logprob: `generated tokens from <span class="tok gen" style="background: hsl(0,85%,95%)">p≈1</span> to <span class="tok gen" style="background: hsl(0,85%,55%)">p≈0</span>`,
    advantage: `<span class="tok gen" style="background: rgba(22,163,74,.7)">positive</span> <span class="tok gen" style="background: rgba(220,38,38,.7)">negative</span> advantage (scaled to the episode's largest)`,
    drift: `|learner − rollout logprob|: <span class="tok gen" style="background: rgba(147,51,234,.1)">≈0</span> to <span class="tok gen" style="background: rgba(147,51,234,1)">≥0.5</span> (stale weights or a drifted tokenizer)`,
  };
  $("#legend").innerHTML = legends[mode];
}

function tooltipText(ep, i) {
  const tk = ep.tokens;
  const seg = { prompt: "prompt", gen: "generated", obs: "environment reply", other: "template" }[tk.segment[i]] || tk.segment[i];
  const lines = [`token ${i} · id ${tk.ids[i]} · ${tk.mask[i] === 1 ? "trained" : "not trained"} (${seg}${tk.turn[i] >= 0 ? `, turn ${tk.turn[i]}` : ""})`];
  if (tk.text) lines.push(`text ${JSON.stringify(tk.text[i])}`);
  if (tk.mask[i] === 1 && tk.logp[i] !== null) lines.push(`logprob ${fmt(tk.logp[i], 4)} (p ${fmt(Math.exp(tk.logp[i]), 4)})`);
  if (tk.adv && tk.adv[i] !== null && tk.mask[i] === 1) lines.push(`advantage ${fmt(tk.adv[i], 4)}`);
  if (tk.learner && tk.learner[i] !== null && tk.mask[i] === 1) {
    const d = tk.logp[i] !== null ? tk.learner[i] - tk.logp[i] : null;
    lines.push(`learner logprob ${fmt(tk.learner[i], 4)} (Δ ${fmt(d, 4)}, ratio ${fmt(d === null ? null : Math.exp(d), 4)})`);
  }
  return lines.join("\n");
}

function onHover(ev) {
  const tip = $("#tooltip");
  const el = ev.target.closest(".pane .tok");
  if (!el) { tip.hidden = true; return; }
  const ep = state.cache.get(Number(el.closest(".pane").dataset.index));
  tip.textContent = tooltipText(ep, Number(el.dataset.i));
  tip.hidden = false;
  const x = Math.min(ev.clientX + 12, window.innerWidth - 430);
  tip.style.left = `${Math.max(x, 0)}px`;
  tip.style.top = `${ev.clientY + 16}px`;
}

// ---- wiring ----

function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.has("e")) state.selected = Number(h.get("e"));
  state.compare = h.has("c") ? Number(h.get("c")) : null;
  if (h.has("tab")) state.tab = h.get("tab");
}

let timer = null;
const refilter = () => { clearTimeout(timer); timer = setTimeout(() => loadList(), 200); };
$("#filters").addEventListener("input", refilter);
$("#filters").addEventListener("change", refilter);
$("#filters").addEventListener("submit", ev => ev.preventDefault());
$("#more").addEventListener("click", () => { state.offset += PAGE; loadList(true); });
$("#episodes tbody").addEventListener("click", ev => {
  const tr = ev.target.closest("tr");
  if (!tr) return;
  state.selected = Number(tr.dataset.index);
  state.compare = null;
  show();
});
for (const b of document.querySelectorAll("#toolbar .tabs button"))
  b.addEventListener("click", () => { state.tab = b.dataset.tab; show(); });
$("#color-mode").addEventListener("change", () => { if (state.tab !== "tokens") state.tab = "tokens"; show(); });
$("#lowp").addEventListener("change", () => show());
document.addEventListener("mouseover", onHover);
readHash();
poll().then(() => show()).catch(e => { $("#status").textContent = String(e); });
