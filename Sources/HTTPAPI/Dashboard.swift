import HTTPTypes
import Hummingbird

extension EntitleAPI {
    func registerDashboard(on routes: RouteTable) {
        // The page holds no data and no secret: its script calls the admin routes with the
        // token the operator gives (the URL's #token=..., kept in the tab's session storage).
        // Script and styles are files of their own, so the policy allows no inline code, and
        // no other site may frame the page.
        routes.add(.get, "/dashboard") { _, _ in Self.asset(DashboardPage.html, type: "text/html; charset=utf-8") }
        routes.add(.get, "/dashboard/app.css") { _, _ in Self.asset(DashboardPage.css, type: "text/css; charset=utf-8") }
        routes.add(.get, "/dashboard/app.js") { _, _ in Self.asset(DashboardPage.script, type: "text/javascript; charset=utf-8") }
    }

    static let dashboardPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        + "form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

    static func asset(_ text: String, type: String) -> Response {
        var headers: HTTPFields = [
            .contentType: type, .contentSecurityPolicy: dashboardPolicy, .cacheControl: "no-store", .xContentTypeOptions: "nosniff",
        ]
        for (name, value) in [("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer")] {
            if let name = HTTPField.Name(name) { headers[name] = value }
        }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}

/// The operators' dashboard: plain HTML, CSS and JavaScript, no build step.
enum DashboardPage {
    static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Entitle dashboard</title>
        <link rel="stylesheet" href="/dashboard/app.css">
        </head>
        <body>
        <header><h1>Entitle</h1><span class="muted">queues, jobs and customers</span>
          <label class="muted">queue <select id="queue"></select></label><span class="status" id="status">connecting…</span></header>
        <section id="login" hidden>
          <h2>Operator token</h2>
          <p class="muted">The API's ENTITLE_ADMIN_TOKEN. It stays in this tab.</p>
          <form id="login-form"><input id="token-input" type="password" size="36" autocomplete="off"> <button>Open</button></form>
        </section>
        <main id="main" hidden>
          <section class="wide">
            <h2>Queues</h2>
            <table id="queues"><thead><tr><th>queue</th><th class="num">pending</th><th class="num">scheduled</th><th class="num">running</th>
              <th class="num">dead</th><th class="num">oldest pending</th><th class="num">workers</th><th class="num">succeeded</th><th class="num">failed</th></tr></thead><tbody></tbody></table>
            <div class="charts">
              <div class="chart"><h3>Depth (pending jobs)</h3><canvas id="chart-depth"></canvas></div>
              <div class="chart"><h3>Oldest pending job (s)</h3><canvas id="chart-age"></canvas></div>
              <div class="chart"><h3>Throughput (jobs/s succeeded)</h3><canvas id="chart-throughput"></canvas></div>
              <div class="chart"><h3>Failures (retries + dead per s)</h3><canvas id="chart-failures"></canvas></div>
            </div>
          </section>
          <section class="wide">
            <h2>Customer lookup</h2>
            <form id="customer-form"><input id="publisher" placeholder="publisher" size="12" value="demo">
              <input id="customer" placeholder="customer (email, username or token)" size="36"> <button>Look up</button></form>
            <div id="customer-result"></div>
          </section>
          <section>
            <h2>Dead jobs <button id="retry-all">Retry all</button> <button id="purge-all" class="danger">Purge all</button></h2>
            <table id="dead"><thead><tr><th>job</th><th>type</th><th>error</th><th></th></tr></thead><tbody></tbody></table>
          </section>
          <section>
            <h2>Recent jobs</h2>
            <table id="recent"><thead><tr><th>job</th><th>type</th><th>status</th><th class="num">attempt</th><th>enqueued</th></tr></thead><tbody></tbody></table>
          </section>
        </main>
        <script src="/dashboard/app.js"></script>
        </body>
        </html>
        """#

    static let css = #"""
          :root { --ink: #1d2330; --muted: #6b7385; --line: #e3e6ee; --accent: #2f6fed; --bad: #d0453a; --ok: #2e9d5b; }
          * { box-sizing: border-box; }
          body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); background: #f6f7fb; }
          header { display: flex; align-items: center; gap: 16px; padding: 12px 24px; background: #fff; border-bottom: 1px solid var(--line); }
          header h1 { font-size: 18px; margin: 0; }
          header .status { margin-left: auto; color: var(--muted); }
          main { padding: 16px 24px; display: grid; gap: 16px; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); }
          section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; }
          section.wide { grid-column: 1 / -1; }
          h2 { font-size: 15px; margin: 0 0 10px; }
          table { width: 100%; border-collapse: collapse; font-size: 13px; }
          th, td { text-align: left; padding: 5px 6px; border-bottom: 1px solid var(--line); vertical-align: top; }
          th { color: var(--muted); font-weight: 600; }
          td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
          .charts { margin-top: 12px; display: grid; grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); gap: 12px; }
          .chart { border: 1px solid var(--line); border-radius: 6px; padding: 8px; }
          .chart h3 { margin: 0 0 4px; font-size: 12px; color: var(--muted); font-weight: 600; }
          canvas { width: 100%; height: 120px; display: block; }
          button { font: inherit; padding: 3px 10px; border: 1px solid var(--line); border-radius: 5px; background: #fff; cursor: pointer; }
          button.danger { color: var(--bad); border-color: #f0c4c0; }
          input, select { font: inherit; padding: 4px 8px; border: 1px solid var(--line); border-radius: 5px; }
          .pill { display: inline-block; padding: 0 8px; border-radius: 9px; font-size: 12px; background: #eef1f7; }
          .pill.succeeded { background: #e3f4ea; color: var(--ok); } .pill.failed { background: #fbe6e4; color: var(--bad); }
          .pill.retrying { background: #fff3d6; color: #9a6b00; }
          .muted { color: var(--muted); } .error { color: var(--bad); }
          pre { background: #f6f7fb; padding: 8px; border-radius: 6px; overflow: auto; max-height: 320px; font-size: 12px; }
          #login { max-width: 420px; margin: 80px auto; }
        """#

    static let script = #"""
        "use strict";
        const state = { token: null, queue: null, samples: [], last: null };
        const $ = (id) => document.getElementById(id);
        const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; };

        // The URL's fragment (never sent to the server) may carry token=, queue=, publisher= and customer=.
        const link = new URLSearchParams(location.hash.slice(1));
        function start() {
          if (link.get("token")) { sessionStorage.setItem("entitle-token", link.get("token")); history.replaceState(null, "", location.pathname); }
          state.token = sessionStorage.getItem("entitle-token");
          if (!state.token) { $("login").hidden = false; return; }
          $("main").hidden = false;
          if (link.get("queue")) state.queue = link.get("queue");
          if (link.get("publisher")) $("publisher").value = link.get("publisher");
          if (link.get("customer")) { $("customer").value = link.get("customer"); lookup(); }
          refresh();
          setInterval(refresh, 2000);
        }
        $("login-form").addEventListener("submit", (e) => {
          e.preventDefault(); sessionStorage.setItem("entitle-token", $("token-input").value); $("login").hidden = true; start();
        });

        async function api(path, options = {}) {
          const response = await fetch(path, { ...options, headers: { "Authorization": "Bearer " + state.token, "Content-Type": "application/json" } });
          const body = await response.json().catch(() => ({}));
          if (response.status === 401) { sessionStorage.removeItem("entitle-token"); }
          if (!response.ok) throw new Error(body.message || response.statusText);
          return body;
        }

        const sum = (counters, prefix) => Object.entries(counters || {}).filter(([k]) => k.startsWith(prefix)).reduce((a, [, v]) => a + v, 0);

        async function refresh() {
          try {
            const { queues } = await api("/v1/queues");
            renderQueues(queues);
            const names = queues.map((q) => q.name);
            if (!state.queue || !names.includes(state.queue)) state.queue = names.includes("default") ? "default" : names[0];
            const select = $("queue");
            if (select.options.length !== names.length) {
              select.replaceChildren(...names.map((n) => { const o = el("option", n); o.value = n; return o; }));
            }
            select.value = state.queue;
            const q = queues.find((x) => x.name === state.queue);
            if (q) sample(q);
            if (state.queue) {
              const [dead, recent] = await Promise.all([
                api(`/v1/admin/queues/${encodeURIComponent(state.queue)}/dead`),
                api(`/v1/admin/queues/${encodeURIComponent(state.queue)}/recent?limit=15`),
              ]);
              renderDead(dead.jobs); renderRecent(recent.jobs);
            }
            $("status").textContent = "updated " + new Date().toLocaleTimeString();
            $("status").className = "status";
          } catch (error) {
            $("status").textContent = "error: " + error.message; $("status").className = "status error";
          }
        }
        $("queue").addEventListener("change", (e) => { state.queue = e.target.value; state.samples = []; state.last = null; refresh(); });

        function renderQueues(queues) {
          $("queues").tBodies[0].replaceChildren(...queues.map((q) => {
            const tr = el("tr");
            tr.append(el("td", q.name));
            for (const v of [q.pending, q.scheduled, q.active, q.dead]) tr.append(el("td", String(v), "num"));
            tr.append(el("td", q.oldestPendingAgeSeconds.toFixed(1) + " s", "num"), el("td", String(q.consumers), "num"),
              el("td", String(sum(q.counters, "succeeded:")), "num"), el("td", String(sum(q.counters, "dead:")), "num"));
            return tr;
          }));
        }

        function sample(q) {
          const now = Date.now() / 1000;
          const succeeded = sum(q.counters, "succeeded:"), failures = sum(q.counters, "retried:") + sum(q.counters, "dead:");
          let throughput = 0, failing = 0;
          if (state.last) {
            const dt = Math.max(0.001, now - state.last.t);
            throughput = Math.max(0, (succeeded - state.last.succeeded) / dt);
            failing = Math.max(0, (failures - state.last.failures) / dt);
          }
          state.last = { t: now, succeeded, failures };
          state.samples.push({ depth: q.pending, age: q.oldestPendingAgeSeconds, throughput, failing });
          if (state.samples.length > 150) state.samples.shift();
          draw("chart-depth", state.samples.map((s) => s.depth), "#2f6fed");
          draw("chart-age", state.samples.map((s) => s.age), "#8a5cf6");
          draw("chart-throughput", state.samples.map((s) => s.throughput), "#2e9d5b");
          draw("chart-failures", state.samples.map((s) => s.failing), "#d0453a");
        }

        function draw(id, values, color) {
          const canvas = $(id), ratio = window.devicePixelRatio || 1;
          const w = canvas.clientWidth, h = canvas.clientHeight;
          canvas.width = w * ratio; canvas.height = h * ratio;
          const g = canvas.getContext("2d"); g.scale(ratio, ratio); g.clearRect(0, 0, w, h);
          const max = Math.max(1, ...values);
          g.strokeStyle = "#e3e6ee"; g.lineWidth = 1;
          for (let i = 0; i <= 4; i++) { const y = 4 + (h - 20) * i / 4; g.beginPath(); g.moveTo(30, y); g.lineTo(w, y); g.stroke(); }
          g.fillStyle = "#6b7385"; g.font = "10px system-ui"; g.fillText(max.toFixed(max < 10 ? 1 : 0), 0, 12); g.fillText("0", 0, h - 16);
          if (values.length < 2) { g.fillText("collecting…", 40, h / 2); return; }
          g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
          values.forEach((v, i) => {
            const x = 30 + (w - 32) * i / (values.length - 1), y = 4 + (h - 20) * (1 - v / max);
            if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
          });
          g.stroke();
          g.fillStyle = color; g.fillText(values[values.length - 1].toFixed(1), w - 40, 12);
        }

        const when = (ms) => ms ? new Date(ms).toLocaleTimeString() : "";
        const pill = (status) => el("span", status, "pill " + status);

        function renderDead(jobs) {
          $("dead").tBodies[0].replaceChildren(...(jobs.length ? jobs.map((j) => {
            const tr = el("tr"), actions = el("td");
            const retry = el("button", "Retry"), purge = el("button", "Purge", "danger");
            retry.onclick = () => act("retry", [j.id]); purge.onclick = () => act("purge", [j.id]);
            actions.append(retry, " ", purge);
            tr.append(el("td", j.id), el("td", j.type), el("td", j.lastError || ""), actions);
            return tr;
          }) : [Object.assign(el("tr"), { innerHTML: '<td colspan="4" class="muted">no dead jobs</td>' })]));
        }

        function renderRecent(jobs) {
          $("recent").tBodies[0].replaceChildren(...jobs.map((j) => {
            const tr = el("tr"), status = el("td"); status.append(pill(j.status));
            tr.append(el("td", j.id), el("td", j.type), status, el("td", String(j.attempt), "num"), el("td", when(j.enqueuedAt)));
            return tr;
          }));
        }

        async function act(action, ids) {
          if (action === "purge" && !confirm(ids ? "Purge this dead job?" : "Purge every dead job of " + state.queue + "?")) return;
          try {
            await api(`/v1/admin/queues/${encodeURIComponent(state.queue)}/dead/${action}`, { method: "POST", body: JSON.stringify(ids ? { ids } : {}) });
          } catch (error) { alert(error.message); }
          refresh();
        }
        $("retry-all").onclick = () => act("retry", null);
        $("purge-all").onclick = () => act("purge", null);

        $("customer-form").addEventListener("submit", (e) => { e.preventDefault(); lookup(); });
        async function lookup() {
          const out = $("customer-result"); out.replaceChildren(el("p", "looking up…", "muted"));
          try {
            const c = await api(`/v1/admin/publishers/${encodeURIComponent($("publisher").value)}/customers/${encodeURIComponent($("customer").value)}`);
            const summary = el("p");
            summary.append(el("strong", c.customer), ` — entitlements: ${c.entitlements.join(", ") || "none"}; credits: ${c.credits.balance}`);
            const table = el("table"); table.append(Object.assign(el("thead"), { innerHTML: "<tr><th>subscription</th><th>offer</th><th>status</th><th>expires</th><th>auto-renew</th></tr>" }));
            const body = el("tbody");
            for (const s of c.subscriptions) {
              const tr = el("tr");
              tr.append(el("td", s.originalTransactionId), el("td", s.offerId), el("td", s.status),
                el("td", s.expiresDate ? new Date(s.expiresDate).toISOString() : ""), el("td", String(s.autoRenew)));
              body.append(tr);
            }
            table.append(body);
            out.replaceChildren(summary, table);
          } catch (error) { out.replaceChildren(el("p", error.message, "error")); }
        }

        start();
        """#
}
