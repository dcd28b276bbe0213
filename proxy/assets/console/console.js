// Palisade console (SPEC §9). Every view is one or more admin API calls made with the
// operator's credential; nothing here decides anything the API does not.
//
// Safety rule of this file: the page is built with DOM nodes and textContent only. No
// innerHTML, no string-built markup, no eval: values come from agents (request bodies,
// operation names) and must show as text.
'use strict';

(() => {
  const S = {
    token: sessionStorage.getItem('palisade.token'),
    who: null,
    required: 1,
    ticks: [],
    stream: null,
    poll: null,
  };
  const $ = (id) => document.getElementById(id);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // el('td', {class: 'mono'}, 'text', child…): attributes are set, strings become text nodes.
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }

  function status(text) { $('status').textContent = text || ''; }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (S.token) h.Authorization = 'Bearer ' + S.token;
    return h;
  }

  // One admin call. A 401 signs the console out; a problem document's detail is the error.
  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: 'no-store', credentials: 'same-origin' };
    // Every mutating admin call says it is JSON, body or not (SPEC §9): what a page on
    // another site cannot send without a preflight.
    if (method !== 'GET') init.headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
    const r = await fetch(path, init);
    const type = r.headers.get('content-type') || '';
    const data = type.includes('json') ? await r.json().catch(() => null) : await r.text();
    if (r.status === 401) {
      signOut('The admin API refused this credential (401). Sign in again.');
      throw new Error('unauthorized');
    }
    return { status: r.status, ok: r.ok, data };
  }

  function problemText(res) {
    const d = res.data;
    if (d && typeof d === 'object') {
      return [d.code, d.detail || d.error || d.title].filter(Boolean).join(': ') || ('HTTP ' + res.status);
    }
    return 'HTTP ' + res.status + (d ? ': ' + String(d).slice(0, 200) : '');
  }

  // ---- sign in ---------------------------------------------------------------------------

  async function whoami() {
    const r = await fetch('/admin/v1/whoami', { headers: headers(), cache: 'no-store' });
    if (!r.ok) return null;
    return r.json();
  }

  async function signIn(token) {
    S.token = token || null;
    const me = await whoami().catch(() => null);
    if (!me) {
      S.token = null;
      return false;
    }
    if (token) sessionStorage.setItem('palisade.token', token);
    else sessionStorage.removeItem('palisade.token');
    S.who = me.name;
    S.required = me.approvals_required || 1;
    $('who').textContent = 'Signed in as ' + me.name;
    $('logout').hidden = false;
    $('login').hidden = true;
    $('view').hidden = false;
    return true;
  }

  function signOut(why) {
    stopView();
    S.token = null;
    S.who = null;
    sessionStorage.removeItem('palisade.token');
    $('who').textContent = '';
    $('logout').hidden = true;
    $('view').hidden = true;
    $('view').replaceChildren();
    $('login').hidden = false;
    $('login-error').textContent = why || '';
    $('token').focus();
  }

  // ---- routing ---------------------------------------------------------------------------

  function stopView() {
    S.ticks.forEach(clearInterval);
    S.ticks = [];
    if (S.poll) clearInterval(S.poll);
    S.poll = null;
    if (S.stream) S.stream.abort();
    S.stream = null;
  }

  const views = {
    escrow: viewEscrows,
    drift: viewDrift,
    fences: viewFences,
    rcns: viewRcns,
    stop: viewStop,
    rules: viewRules,
    shadow: viewShadow,
    log: viewLog,
  };

  async function route() {
    if (!S.who) return;
    stopView();
    const parts = (location.hash || '#/escrow').slice(2).split('/');
    const name = views[parts[0]] ? parts[0] : 'escrow';
    for (const a of document.querySelectorAll('nav a')) {
      if (a.getAttribute('href') === '#/' + name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    const root = $('view');
    root.replaceChildren();
    status('');
    try {
      if (name === 'escrow' && parts[1]) await viewEscrow(root, decodeURIComponent(parts[1]));
      else await views[name](root);
    } catch (e) {
      if (e.message !== 'unauthorized') status('Could not load this view: ' + e.message);
    }
  }

  // ---- time ------------------------------------------------------------------------------

  function left(ms) {
    if (ms <= 0) return 'expired';
    const s = Math.floor(ms / 1000);
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const r = s % 60;
    return (h ? h + 'h ' : '') + (h || m ? m + 'm ' : '') + r + 's left';
  }

  // A live countdown to `expiresMs` (this browser's clock, corrected by `skewMs`).
  function countdown(node, expiresMs, skewMs, onExpire) {
    const paint = () => {
      const ms = expiresMs - (Date.now() + skewMs);
      node.textContent = left(ms);
      node.className = ms <= 0 ? 'bad' : ms < 60000 ? 'warn' : '';
      if (ms <= 0 && onExpire) { onExpire(); onExpire = null; }
    };
    paint();
    S.ticks.push(setInterval(paint, 1000));
  }

  // ---- held writes -----------------------------------------------------------------------

  async function viewEscrows(root) {
    const h = el('h1', {}, 'Held writes');
    const note = el('p', { class: 'muted' },
      'Writes held for human approval (HUMAN_ESCROW). Each needs ', String(S.required),
      ' approval(s) from distinct names; one rejection rejects.');
    const table = el('table', { id: 'escrows' },
      el('caption', { class: 'muted' }, 'Refreshed every 5 seconds'),
      el('thead', {}, el('tr', {},
        ['Operation', 'Held at', 'Lease', 'Approvals', 'State'].map((t) => el('th', { scope: 'col' }, t)),
        el('th', { scope: 'col' }, el('span', { class: 'visually-hidden' }, 'Actions')))));
    const body = el('tbody');
    table.append(body);
    root.append(h, note, table);
    const load = async () => {
      const res = await api('GET', '/admin/v1/escrow');
      if (!res.ok) { status(problemText(res)); return; }
      S.ticks.forEach(clearInterval);
      S.ticks = [];
      const rows = res.data.escrows.map((e) => {
        const lease = el('span');
        if (e.lease_expires_at_ms) countdown(lease, e.lease_expires_at_ms, 0);
        else lease.textContent = '—';
        return el('tr', { 'data-escrow-id': e.escrow_id },
          el('td', { class: 'mono' }, e.operation || '(unbound)',
            e.operation_key ? el('div', { class: 'muted', title: 'the operation as freezes and budgets name it' },
              'operation: ' + e.operation_key) : null,
            e.rule ? el('div', { class: 'muted', title: 'the operator rule that held it' },
              'rule: ' + e.rule) : null),
          el('td', {}, e.held_at),
          el('td', {}, lease),
          el('td', {}, (e.approvals || []).length + ' of ' + (e.approvals_required || S.required)),
          el('td', {}, e.state),
          el('td', {}, el('a', {
            href: '#/escrow/' + encodeURIComponent(e.escrow_id),
            'aria-label': 'Review ' + (e.operation || 'write') + ' held at ' + e.held_at,
          }, 'Review')));
      });
      body.replaceChildren(...(rows.length ? rows
        : [el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'No write is held.'))]));
    };
    await load();
    S.poll = setInterval(() => load().catch(() => {}), 5000);
  }

  async function viewEscrow(root, id) {
    const res = await api('GET', '/admin/v1/escrow/' + encodeURIComponent(id));
    root.append(el('p', {}, el('a', { href: '#/escrow' }, '← All held writes')));
    if (!res.ok) {
      root.append(el('p', { class: 'error' }, problemText(res)));
      return;
    }
    const e = res.data;
    const skew = e.lease_expires_at_ms && e.lease_left_ms !== undefined
      ? e.lease_expires_at_ms - e.lease_left_ms - Date.now() : 0;
    const open = e.state === 'held';
    root.append(el('h1', {}, 'Held write: ', el('span', { class: 'mono' }, e.operation || '(unbound)')));

    const leaseLeft = el('span', { id: 'lease-left' });
    const approvals = e.approvals || [];
    const facts = el('dl', { class: 'facts' },
      fact('Escrow', e.escrow_id, true),
      fact('State', e.state),
      fact('Request (as sent)', e.operation, true),
      fact('Operation (for a freeze or a budget)', e.operation_key || '(not recorded)', true),
      fact('Resource (for a freeze)', e.resource || '(not recorded)', true),
      fact('Caller', e.caller || '(not identified)', true),
      fact('Held by', e.rule
        ? 'the operator rule ' + e.rule + (e.rule_reason ? ': ' + e.rule_reason : '')
          + (e.hold_expires_at ? ' (rejected if undecided at ' + e.hold_expires_at + ')' : '')
        : 'its lease (HUMAN_ESCROW)'),
      fact('Contract', e.contract_digest || '(no contract binds it)', true),
      fact('Request digest', e.request_digest, true),
      fact('Lease', e.lease_id, true),
      el('dt', {}, 'Lease window'), el('dd', {}, leaseLeft),
      fact('Approvals', approvals.length + ' of ' + (e.approvals_required || S.required)
        + (approvals.length ? ' (' + approvals.join(', ') + ')' : '')),
      fact('Held at', e.held_at));
    root.append(el('div', { class: 'panel' }, facts));

    // The contract's input check, run again now under the bundle in force.
    const c = e.input_check || { bound: false };
    root.append(el('h2', {}, 'Contract input check'));
    root.append(el('p', { id: 'input-check', class: c.bound ? (c.ok ? 'ok' : 'bad') : 'muted' },
      !c.bound ? 'No contract of the bundle in force covers this operation.'
        : c.ok ? 'Passes the contract\u2019s input check.'
          : 'Fails: ' + [c.code, c.location ? 'at ' + c.location : null, c.detail].filter(Boolean).join(' — ')));

    // The request body beside the resource as it was before the write.
    const req = e.request || {};
    root.append(el('h2', {}, req.method ? req.method + ' ' + req.target : 'Request'));
    const before = e.pre_image;
    const cols = el('div', { class: 'cols' },
      el('section', { class: 'panel', 'aria-labelledby': 'pre-h' },
        el('h2', { id: 'pre-h' }, 'Resource now (pre-image)'),
        el('pre', { id: 'pre-image' }, shown(before))),
      el('section', { class: 'panel', 'aria-labelledby': 'body-h' },
        el('h2', { id: 'body-h' }, 'Request body'),
        el('pre', { id: 'request-body' }, shown(req.body))));
    root.append(cols);
    const a = before && before.body && 'json' in before.body ? before.body.json : undefined;
    const b = req.body && 'json' in req.body ? req.body.json : undefined;
    if (b !== undefined) {
      root.append(el('h2', {}, 'Changes'));
      root.append(diffTable(a === undefined ? null : a, b, before && before.absent));
    }

    // The decision.
    const reason = el('textarea', { id: 'reason', maxlength: 280 });
    const approve = el('button', { id: 'approve', type: 'button' }, 'Approve');
    const reject = el('button', { id: 'reject', type: 'button', class: 'danger' }, 'Reject');
    const said = el('p', { id: 'decision', role: 'alert' });
    const mine = approvals.includes(S.who);
    approve.disabled = !open || e.expired || mine;
    reject.disabled = !open;
    if (mine) said.textContent = 'You have approved this write; another name must approve it too.';
    if (e.expired) said.textContent = 'Its lease has expired: it can no longer be approved.';
    const decide = async (verb) => {
      approve.disabled = reject.disabled = true;
      const body = { request_digest: e.request_digest, reason: reason.value || null };
      if (e.contract_digest) body.contract_digest = e.contract_digest;
      const r = await api('POST', '/admin/v1/escrow/' + encodeURIComponent(e.escrow_id) + '/' + verb, body);
      let said = 'Refused: ' + problemText(r);
      // 409 with the escrow's document: the release was refused, nothing was sent.
      if (r.status === 409 && r.data && r.data.state === 'refused') {
        said = 'Not released: the release was refused (' + (r.data.code || 'no code') + ').';
      }
      if (r.ok) {
        const st = r.data.state;
        said = st === 'held'
          ? 'Approval recorded: ' + (r.data.approvals || []).length + ' of ' + S.required
          : 'The write is ' + st + (r.data.code ? ' (' + r.data.code + ')' : '') + '.';
      }
      await route();
      status(said);
    };
    approve.addEventListener('click', () => decide('approve'));
    reject.addEventListener('click', () => decide('reject'));
    if (e.lease_expires_at_ms) {
      countdown(leaseLeft, e.lease_expires_at_ms, skew, () => {
        if (open) {
          approve.disabled = true;
          said.textContent = 'Its lease has expired: it can no longer be approved.';
        }
      });
    } else {
      leaseLeft.textContent = '—';
    }
    root.append(el('h2', {}, 'Decision'),
      el('div', { class: 'stack' },
        el('label', { for: 'reason' }, 'Reason (optional, kept in the receipt)'), reason,
        el('div', { class: 'row' }, approve, reject)),
      said);
  }

  function fact(name, value, mono) {
    return [el('dt', {}, name), el('dd', { class: mono ? 'mono' : null }, value === undefined || value === null ? '—' : String(value))];
  }

  // A body as the API shows it: {json}, {text}, {bytes}, {absent}.
  function shown(b) {
    if (!b) return '(not fetched)';
    if (b.absent) return '(absent: the resource did not exist)';
    if ('json' in b) return JSON.stringify(b.json, null, 2);
    if ('text' in b) return b.text + (b.truncated ? '\n… (' + b.truncated + ' bytes in all)' : '');
    if ('body' in b) return shown(b.body);
    return '(' + b.bytes + ' bytes, not text)';
  }

  // RFC 6901 pointers of every leaf of a JSON value.
  function leaves(v, at, out) {
    if (v !== null && typeof v === 'object' && Object.keys(v).length) {
      for (const k of Object.keys(v)) {
        leaves(v[k], at + '/' + String(k).replace(/~/g, '~0').replace(/\//g, '~1'), out);
      }
    } else {
      out.set(at, JSON.stringify(v));
    }
    return out;
  }

  function diffTable(before, after, absent) {
    const a = before === null ? new Map() : leaves(before, '', new Map());
    const b = leaves(after, '', new Map());
    const keys = [...new Set([...a.keys(), ...b.keys()])].sort();
    const rows = keys.map((k) => {
      const kind = !a.has(k) ? 'added' : !b.has(k) ? 'removed' : a.get(k) === b.get(k) ? 'same' : 'changed';
      return el('tr', { class: kind },
        el('td', { class: 'mono' }, k || '(whole value)'),
        el('td', {}, kind),
        el('td', { class: 'mono' }, a.has(k) ? a.get(k) : ''),
        el('td', { class: 'mono' }, b.has(k) ? b.get(k) : ''));
    });
    return el('table', { id: 'diff' },
      el('caption', { class: 'muted' }, absent ? 'The resource did not exist before.'
        : before === null ? 'No pre-image was fetched (or it is not JSON): every member is shown as added.'
          : 'Every member of the request body and of the pre-image: added, removed, changed or the same.'),
      el('thead', {}, el('tr', {}, ['Member', 'Change', 'Before', 'After'].map((t) => el('th', { scope: 'col' }, t)))),
      el('tbody', {}, rows));
  }

  // ---- drift events ----------------------------------------------------------------------

  async function viewDrift(root) {
    const category = el('select', { id: 'drift-category' }, el('option', { value: '' }, 'All'));
    const code = el('input', { id: 'drift-code', type: 'search', placeholder: 'ERR_…', spellcheck: 'false' });
    const live = el('span', { id: 'drift-live', class: 'muted' }, 'connecting…');
    const body = el('tbody');
    const seen = new Set();
    const apply = () => {
      const c = category.value;
      const q = code.value.trim().toUpperCase();
      for (const tr of body.children) {
        tr.hidden = (c && tr.dataset.category !== c) || (q && !tr.dataset.code.includes(q));
      }
    };
    category.addEventListener('change', apply);
    code.addEventListener('input', apply);
    root.append(el('h1', {}, 'Drift events'),
      el('p', { class: 'muted' }, 'Every refusal and drift as it happens, newest first. ', live),
      el('div', { class: 'filters' },
        el('div', {}, el('label', { for: 'drift-category' }, 'Category'), category),
        el('div', {}, el('label', { for: 'drift-code' }, 'Code contains'), code)),
      el('table', { id: 'drift-table' },
        el('thead', {}, el('tr', {}, ['Time', 'Category', 'Code', 'Action', 'Where', 'Caller'].map((t) => el('th', { scope: 'col' }, t)))),
        body));
    const add = (ev) => {
      const cat = ev.category || ev.event || 'lifecycle';
      if (!seen.has(cat)) {
        seen.add(cat);
        category.append(el('option', { value: cat }, cat));
      }
      const tr = el('tr', { 'data-category': cat, 'data-code': ev.code || '' },
        el('td', {}, ev.timestamp || ev.at || ''),
        el('td', {}, cat),
        el('td', { class: 'mono' }, ev.code || ''),
        el('td', {}, ev.actionTaken || ''),
        el('td', { class: 'mono' }, [ev.observedIdentifier, ev.violationLocation].filter(Boolean).join(' ')),
        el('td', { class: 'mono' }, ev.caller || ''));
      body.prepend(tr);
      while (body.children.length > 500) body.lastChild.remove();
      apply();
    };
    follow(add, live);
  }

  // Drift events as Server-Sent Events, read with fetch so the request carries the bearer
  // token (EventSource cannot send one). Reconnects from the last cursor.
  async function follow(onEvent, live) {
    const ctrl = new AbortController();
    S.stream = ctrl;
    let after = null;
    while (!ctrl.signal.aborted) {
      try {
        const q = after === null ? '?backlog=50' : '?after=' + encodeURIComponent(after);
        const r = await fetch('/admin/v1/drift-events/stream' + q,
          { headers: headers(), signal: ctrl.signal, cache: 'no-store' });
        if (r.status === 401) { signOut('The admin API refused this credential (401).'); return; }
        if (!r.ok) throw new Error('HTTP ' + r.status);
        live.textContent = 'Live.';
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const msg = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let data = '';
            for (const line of msg.split('\n')) {
              if (line.startsWith('id: ')) after = line.slice(4);
              else if (line.startsWith('data: ')) data += line.slice(6);
            }
            if (data) {
              try { onEvent(JSON.parse(data)); } catch (_) { /* not JSON: skipped */ }
            }
          }
        }
      } catch (_) {
        if (ctrl.signal.aborted) return;
      }
      live.textContent = 'Reconnecting…';
      await sleep(1000);
    }
  }

  // ---- fences ----------------------------------------------------------------------------

  async function viewFences(root) {
    const input = el('input', { id: 'fence-key', type: 'text', size: 60, spellcheck: 'false', required: true });
    const out = el('div', { id: 'fence-result', 'aria-live': 'polite' });
    const form = el('form', { class: 'stack' },
      el('label', { for: 'fence-key' }, 'Resource (its URI, a path under the public base, or mcp:tool/…)'),
      input, el('div', { class: 'row' }, el('button', { type: 'submit' }, 'Look up')));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const res = await api('GET', '/admin/v1/fences/' + encodeURIComponent(input.value.trim()));
      out.replaceChildren(res.ok
        ? el('dl', { class: 'facts panel' }, fact('Resource', res.data.resource, true),
          fact('Epoch', String(res.data.epoch) + (res.data.epoch === 0 ? ' (never fenced)' : '')))
        : el('p', { class: 'error' }, problemText(res)));
    });
    root.append(el('h1', {}, 'Fences'),
      el('p', { class: 'muted' }, 'A resource\u2019s CAS fence epoch: a write must carry a newer one.'), form, out);
  }

  // ---- RCNS contracts --------------------------------------------------------------------

  async function viewRcns(root) {
    root.append(el('h1', {}, 'RCNS contracts'));
    const res = await api('GET', '/admin/v1/rcns/contracts');
    if (!res.ok) { root.append(el('p', { class: 'muted' }, problemText(res))); return; }
    const rows = res.data.contracts.map((c) => {
      const revoke = el('button', { type: 'button', class: 'danger', 'aria-label': 'Revoke ' + c.synthesis_id }, 'Revoke');
      revoke.disabled = !!c.revoked;
      revoke.addEventListener('click', async () => {
        const r = await api('POST', '/admin/v1/rcns/contracts/' + encodeURIComponent(c.synthesis_id) + '/revoke');
        await route();
        status(r.ok ? 'Revoked ' + c.synthesis_id : 'Refused: ' + problemText(r));
      });
      return el('tr', {},
        el('td', { class: 'mono' }, c.synthesis_id),
        el('td', { class: 'mono' }, (c.method || '') + ' ' + (c.path || '')),
        el('td', {}, c.originating_agent_id || ''),
        el('td', {}, c.expires_at || ''),
        el('td', {}, c.revoked ? 'revoked' : 'live'),
        el('td', {}, revoke));
    });
    root.append(el('table', {},
      el('thead', {}, el('tr', {}, ['Contract', 'Operation', 'Agent', 'Expires', 'State', 'Actions'].map((t) => el('th', { scope: 'col' }, t)))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'No synthesized contract.')))));
  }

  // ---- freezes and budgets ---------------------------------------------------------------

  // ---- operator rules and the candidate in shadow (SPEC §15) --------------------------------

  async function viewRules(root) {
    root.append(el('h1', {}, 'Operator rules'));
    const res = await api('GET', '/admin/v1/rules');
    if (!res.ok) { root.append(el('p', { class: 'error' }, problemText(res))); return; }
    const d = res.data;
    root.append(el('p', { class: 'muted' }, d.rules_digest
      ? 'In force: ' + d.rules_digest + '. In order: the first rule in force that matches decides; a rule in report mode only records.'
      : 'No rules are configured ([rules] file).'));
    const rows = d.rules.map((r) => {
      const decided = Object.entries(r.decisions || {}).map(([k, n]) => k + ' ' + n).join(', ');
      return el('tr', { 'data-rule': r.name },
        el('td', { class: 'mono' }, r.name),
        el('td', { class: 'mono' }, (r.on || ['every write']).join(', ')),
        el('td', { class: 'mono' }, r.when || '(always)'),
        el('td', {}, r.action + (r.mode === 'report' ? ' (report only)' : '')
          + (r.approvals ? ', ' + r.approvals + ' approvers' : '')),
        el('td', {}, r.reason || ''),
        el('td', {}, decided || 'none yet'));
    });
    root.append(el('table', { id: 'rules' },
      el('thead', {}, el('tr', {}, ['Rule', 'On', 'When', 'Action', 'Reason', 'Decided here'].map((t) => el('th', { scope: 'col' }, t)))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'No rule.')))));
  }

  async function viewShadow(root) {
    root.append(el('h1', {}, 'Candidate bundle in shadow'));
    const res = await api('GET', '/admin/v1/shadow');
    if (!res.ok) { root.append(el('p', { class: 'error' }, problemText(res))); return; }
    const d = res.data;
    if (!d.candidate) {
      root.append(el('p', { class: 'muted', id: 'shadow-none' }, 'No candidate is configured (rich.candidate).'));
      return;
    }
    root.append(el('p', {}, 'Candidate ' + d.candidate.lockfile_digest
      + (d.candidate.rules_digest ? ' with rules ' + d.candidate.rules_digest : '')
      + ', loaded ' + d.candidate.loaded_at + ': ' + d.compared + ' writes compared, '
      + d.disagreed + ' decided otherwise.'));
    const rows = d.counts.filter((c) => !c.agree).map((c) => el('tr', {},
      el('td', { class: 'mono' }, c.operation), el('td', {}, c.in_force),
      el('td', {}, c.candidate), el('td', {}, String(c.writes))));
    root.append(el('h2', {}, 'Disagreements'), el('table', { id: 'shadow' },
      el('thead', {}, el('tr', {}, ['Operation', 'In force', 'Candidate', 'Writes'].map((t) => el('th', { scope: 'col' }, t)))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 4, class: 'muted' }, 'None so far.')))));
  }

  async function viewStop(root) {
    root.append(el('h1', {}, 'Freezes and budgets'));
    const res = await api('GET', '/admin/v1/freeze');
    const rows = (res.ok ? res.data.freezes : []).map((f) => {
      const lift = el('button', { type: 'button', 'aria-label': 'Lift freeze ' + f.id }, 'Lift');
      lift.addEventListener('click', async () => {
        const r = await api('DELETE', '/admin/v1/freeze/' + encodeURIComponent(f.id));
        await route();
        status(r.ok ? 'Lifted ' + f.id : 'Refused: ' + problemText(r));
      });
      return el('tr', {},
        el('td', {}, f.scope), el('td', { class: 'mono' }, f.value || '(every write)'),
        el('td', {}, f.reason), el('td', {}, f.by), el('td', {}, f.until || 'until lifted'),
        el('td', {}, f.in_force ? 'in force' : 'expired'), el('td', {}, lift));
    });
    root.append(el('h2', {}, 'Freezes'), el('table', { id: 'freezes' },
      el('thead', {}, el('tr', {}, ['Scope', 'Value', 'Reason', 'By', 'Until', 'State', 'Actions'].map((t) => el('th', { scope: 'col' }, t)))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 7, class: 'muted' }, res.ok ? 'No freeze.' : problemText(res))))));

    const scope = el('select', { id: 'freeze-scope' },
      ['all', 'caller', 'operation', 'resource'].map((s) => el('option', { value: s }, s)));
    const value = el('input', { id: 'freeze-value', type: 'text', size: 40, spellcheck: 'false' });
    const reason = el('input', { id: 'freeze-reason', type: 'text', size: 40, required: true });
    const form = el('form', { class: 'stack' },
      el('label', { for: 'freeze-scope' }, 'Stop writes of'), scope,
      el('label', { for: 'freeze-value' }, 'Which caller, operation or resource (none for all)'), value,
      el('label', { for: 'freeze-reason' }, 'Reason'), reason,
      el('div', { class: 'row' }, el('button', { type: 'submit', class: 'danger' }, 'Freeze')));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const body = { scope: scope.value, reason: reason.value };
      if (scope.value !== 'all') body.value = value.value;
      const r = await api('POST', '/admin/v1/freeze', body);
      if (r.ok) await route();
      status(r.ok ? 'Frozen: ' + r.data.id : 'Refused: ' + problemText(r));
    });
    root.append(el('h2', {}, 'Freeze writes'), form);

    const b = await api('GET', '/admin/v1/budgets');
    const rules = b.ok ? b.data.rules : [];
    root.append(el('h2', {}, 'Write budgets'), el('table', { id: 'budgets' },
      el('thead', {}, el('tr', {}, ['Rule', 'Per', 'Writes', 'Window'].map((t) => el('th', { scope: 'col' }, t)))),
      el('tbody', {}, rules.length ? rules.map((r) => el('tr', {},
        el('td', {}, r.name), el('td', {}, r.per.join(', ') || 'the whole fleet'),
        el('td', {}, String(r.limit)), el('td', {}, (r.window_ms / 1000) + ' s')))
        : el('tr', {}, el('td', { colspan: 4, class: 'muted' }, 'No budget is configured.')))));
  }

  // ---- the receipt log -------------------------------------------------------------------

  const enc = new TextEncoder();
  const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const hex = (u) => [...u].map((x) => x.toString(16).padStart(2, '0')).join('');
  const same = (x, y) => x.length === y.length && x.every((v, i) => v === y[i]);
  async function sha256(...parts) {
    const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { all.set(p, at); at += p.length; }
    return new Uint8Array(await crypto.subtle.digest('SHA-256', all));
  }

  // The C2SP signed note's own signature, verified here with WebCrypto's Ed25519.
  async function verifyNote(note, keyText) {
    const k = keyText.trim();
    // <name>+<hex id>+<base64>: a name holds no '+', the base64 may.
    const p1 = k.indexOf('+');
    const p2 = k.indexOf('+', p1 + 1);
    const name = k.slice(0, p1);
    const keyId = k.slice(p1 + 1, p2);
    const raw = b64(k.slice(p2 + 1));
    if (raw[0] !== 1 || raw.length !== 33) throw new Error('the key is not an Ed25519 note key');
    const pub = raw.slice(1);
    const id = await sha256(enc.encode(name + '\n'), raw);
    if (hex(id.slice(0, 4)) !== keyId) throw new Error('the key ID does not match the key');
    const split = note.indexOf('\n\n');
    if (split < 0) throw new Error('the checkpoint has no signature');
    const text = note.slice(0, split + 1);
    const sigs = note.slice(split + 2).split('\n').filter(Boolean);
    let ours = null;
    let others = 0;
    for (const line of sigs) {
      const m = /^\u2014 (\S+) (\S+)$/.exec(line);
      if (!m) continue;
      const sig = b64(m[2]);
      if (m[1] === name && hex(sig.slice(0, 4)) === keyId) ours = sig.slice(4);
      else others += 1;
    }
    if (!ours) throw new Error('no signature by the log\u2019s key');
    const key = await crypto.subtle.importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
    const ok = await crypto.subtle.verify({ name: 'Ed25519' }, key, ours, enc.encode(text));
    const [origin, size, root] = text.split('\n');
    return { ok, origin, size: Number(size), root, others };
  }

  // RFC 9162 §2.1.4.2: the newer tree contains the older one.
  async function verifyConsistency(first, second, firstHash, secondHash, proof) {
    if (first === second) return proof.length === 0 && same(firstHash, secondHash);
    if (!proof.length) return false;
    const node = (l, r) => sha256(Uint8Array.of(1), l, r);
    if ((first & (first - 1)) === 0) proof = [firstHash, ...proof];
    let fn = first - 1;
    let sn = second - 1;
    while (fn % 2 === 1) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
    let fr = proof[0];
    let sr = proof[0];
    for (const c of proof.slice(1)) {
      if (sn === 0) return false;
      if (fn % 2 === 1 || fn === sn) {
        fr = await node(c, fr);
        sr = await node(c, sr);
        if (fn % 2 === 0) {
          while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
        }
      } else {
        sr = await node(sr, c);
      }
      fn = Math.floor(fn / 2);
      sn = Math.floor(sn / 2);
    }
    return same(fr, firstHash) && same(sr, secondHash) && sn === 0;
  }

  async function viewLog(root) {
    root.append(el('h1', {}, 'Receipt log'));
    const [cp, key] = await Promise.all([api('GET', '/admin/v1/log/checkpoint'), api('GET', '/admin/v1/log/key')]);
    if (!cp.ok || !key.ok) { root.append(el('p', { class: 'error' }, problemText(cp.ok ? key : cp))); return; }
    const result = el('p', { id: 'log-verified' }, 'Verifying…');
    const facts = el('dl', { class: 'facts' });
    root.append(el('div', { class: 'panel' }, facts), result,
      el('h2', {}, 'Newest checkpoint'), el('pre', { class: 'panel mono', id: 'checkpoint' }, cp.data),
      el('h2', {}, 'Verifier key'), el('p', { class: 'mono' }, key.data.trim()));
    if (!(crypto && crypto.subtle)) {
      result.className = 'warn';
      result.textContent = 'This browser cannot verify here (WebCrypto needs a secure context: HTTPS or localhost).';
      return;
    }
    try {
      const v = await verifyNote(cp.data, key.data);
      facts.append(...fact('Origin', v.origin, true), ...fact('Entries', String(v.size)),
        ...fact('Root', v.root, true), ...fact('Witness cosignatures', String(v.others)));
      if (!v.ok) throw new Error('the signature does not verify');
      let said = 'Signature verified with the log\u2019s key (Ed25519, in this browser).';
      const prev = JSON.parse(sessionStorage.getItem('palisade.checkpoint') || 'null');
      if (prev && prev.origin === v.origin && prev.size > 0 && prev.size < v.size) {
        const proof = await api('GET', '/admin/v1/log/consistency?old=' + prev.size + '&new=' + v.size);
        const good = proof.ok && await verifyConsistency(prev.size, v.size, b64(prev.root), b64(v.root), proof.data.map(b64));
        if (!good) throw new Error('the log is not an extension of the checkpoint seen before (size ' + prev.size + ')');
        said += ' Consistent with the checkpoint seen before at size ' + prev.size + '.';
      }
      if (!prev || prev.size <= v.size) {
        sessionStorage.setItem('palisade.checkpoint', JSON.stringify({ origin: v.origin, size: v.size, root: v.root }));
      }
      result.className = 'ok';
      result.textContent = said;
    } catch (e) {
      result.className = 'bad';
      result.textContent = 'Verification failed: ' + e.message;
    }
  }

  // ---- start -----------------------------------------------------------------------------

  document.addEventListener('DOMContentLoaded', async () => {
    $('login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const token = $('token').value.trim();
      $('login-error').textContent = '';
      if (!token) { $('login-error').textContent = 'Enter your admin token, or use your client certificate.'; return; }
      if (await signIn(token)) { $('token').value = ''; await route(); $('main').focus(); }
      else $('login-error').textContent = 'This token was refused.';
    });
    $('cert-login').addEventListener('click', async () => {
      if (await signIn(null)) await route();
      else $('login-error').textContent = 'No client certificate the admin listener accepts was presented.';
    });
    $('logout').addEventListener('click', () => signOut(''));
    window.addEventListener('hashchange', () => route());
    // A token from earlier in this tab, else no credential at all (a client certificate, or
    // a loopback listener with none configured).
    if (await signIn(S.token) || await signIn(null)) await route();
    else signOut('');
  });
})();
