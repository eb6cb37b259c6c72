// The pev viewer's one script: plan graphs laid out by dagre, and live updates of running tasks.
// Every text it draws comes from the page's escaped markup or JSON data blocks, and is set with
// textContent, never parsed as markup.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";

  function svg(name, attributes) {
    const element = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes || {})) {
      element.setAttribute(key, String(value));
    }
    return element;
  }

  function drawGraph(container) {
    const data = document.getElementById(container.dataset.graph);
    if (!data || typeof dagre === "undefined") {
      return;
    }
    const plan = JSON.parse(data.textContent);
    const graph = new dagre.graphlib.Graph();
    graph.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 46, marginx: 8, marginy: 8 });
    graph.setDefaultEdgeLabel(function () { return {}; });
    for (const node of plan.nodes) {
      const longest = Math.max(node.id.length, node.tool.length, node.label.length);
      graph.setNode(node.id, { node: node, width: Math.max(90, 7.4 * longest + 24), height: 54 });
    }
    for (const [from, to] of plan.edges) {
      graph.setEdge(from, to);
    }
    dagre.layout(graph);
    const size = graph.graph();
    const drawing = svg("svg", {
      width: Math.ceil(size.width), height: Math.ceil(size.height),
      viewBox: "0 0 " + Math.ceil(size.width) + " " + Math.ceil(size.height),
      role: "img", class: "plan-graph",
    });
    const defs = svg("defs");
    const marker = svg("marker", {
      id: container.id + "-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
    });
    marker.appendChild(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }));
    defs.appendChild(marker);
    drawing.appendChild(defs);
    for (const edge of graph.edges()) {
      const points = graph.edge(edge).points;
      const d = points.map(function (p, i) { return (i ? "L" : "M") + p.x + " " + p.y; }).join(" ");
      drawing.appendChild(svg("path", {
        d: d, class: "edge", "marker-end": "url(#" + container.id + "-arrow)",
      }));
    }
    for (const id of graph.nodes()) {
      const placed = graph.node(id);
      const node = placed.node;
      // A settled record of unknown outcome: drawn in its settled status, marked reconciled.
      // A node satisfied by an effect the task already had: drawn as succeeded, marked reused,
      // and a link to the row of the record it reuses.
      const group = svg("g", {
        class: "graph-node status-" + node.css + (node.reconciled ? " reconciled" : "")
          + (node.reused ? " reused" : ""),
        "data-node": node.id, "data-status": node.status, "data-reconciled": node.reconciled,
        "data-reused": node.reused ? "true" : "false",
        transform: "translate(" + (placed.x - placed.width / 2) + "," + (placed.y - placed.height / 2) + ")",
      });
      group.appendChild(svg("rect", { width: placed.width, height: placed.height, rx: 6, ry: 6 }));
      const lines = [[node.id, "name"], [node.tool, "tool"], [node.label, "state"]];
      lines.forEach(function ([text, kind], index) {
        const label = svg("text", { x: placed.width / 2, y: 16 + index * 15, class: kind });
        label.textContent = text;
        group.appendChild(label);
      });
      const title = svg("title");
      title.textContent = node.id + ": " + node.title;
      group.appendChild(title);
      if (node.reused) {
        const link = svg("a", { href: "#" + node.reused, class: "reused-link" });
        link.appendChild(group);
        drawing.appendChild(link);
      } else {
        drawing.appendChild(group);
      }
    }
    container.replaceChildren(drawing);
  }

  function drawGraphs(root) {
    root.querySelectorAll(".graph[data-graph]").forEach(drawGraph);
  }

  async function fetchPage() {
    const response = await fetch(window.location.pathname + window.location.search, {
      headers: { accept: "text/html" }, cache: "no-store",
    });
    if (!response.ok) {
      return null;
    }
    return new DOMParser().parseFromString(await response.text(), "text/html");
  }

  function followTask(body) {
    let pending = false;
    const stream = new EventSource("/tasks/" + body.dataset.task + "/stream?after=" + body.dataset.seq);
    async function refresh() {
      if (pending) {
        return;
      }
      pending = true;
      try {
        const page = await fetchPage();
        const fresh = page && page.getElementById("task-body");
        const current = document.getElementById("task-body");
        if (fresh && current) {
          const adopted = document.importNode(fresh, true);
          current.replaceWith(adopted);
          drawGraphs(adopted);
          if (!adopted.dataset.live) {
            stream.close();
          }
        }
      } finally {
        pending = false;
      }
    }
    stream.addEventListener("changed", refresh);
    stream.addEventListener("ended", function () { stream.close(); refresh(); });
  }

  function followList(table) {
    const timer = window.setInterval(async function () {
      const page = await fetchPage();
      const fresh = page && page.getElementById("task-list");
      const current = document.getElementById("task-list");
      if (fresh && current) {
        current.replaceWith(document.importNode(fresh, true));
        if (!fresh.dataset.live) {
          window.clearInterval(timer);
        }
      }
    }, 3000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawGraphs(document);
    const body = document.getElementById("task-body");
    if (body && body.dataset.live) {
      followTask(body);
    }
    const list = document.getElementById("task-list");
    if (list && list.dataset.live) {
      followList(list);
    }
  });
})();
