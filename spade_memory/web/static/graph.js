// The graph view: a small force layout drawn on a <canvas>. Entities are sized by
// degree and coloured by community; clicking one opens the memories naming it.
// Labels are drawn as canvas text (never parsed as HTML).
"use strict";
(function () {
  const canvas = document.getElementById("graph");
  if (!canvas) { return; }
  const hover = document.getElementById("graph-hover");
  const context = canvas.getContext("2d");
  const palette = ["#2f6fdf", "#e0803a", "#3aa267", "#c0392b", "#8e5cc9", "#8c6d31",
                   "#d45fae", "#6b7a8f", "#b5b82c", "#1fa5b8"];

  function colour(community) { return palette[community % palette.length]; }
  function radius(node) { return 4 + Math.min(18, 2.2 * Math.sqrt(node.degree + node.memories)); }

  function layout(nodes, edges, width, height) {
    // Fruchterman-Reingold style: repulsion between every pair, springs on edges,
    // a pull to the centre; a cooling step size. O(n^2) per step, n <= 400.
    const k = Math.sqrt((width * height) / Math.max(1, nodes.length)) * 0.75;
    nodes.forEach((node, i) => {
      const angle = (2 * Math.PI * i) / nodes.length;
      const ring = 0.35 * Math.min(width, height) * (0.4 + 0.6 * ((i * 7919) % 97) / 97);
      node.x = width / 2 + ring * Math.cos(angle);
      node.y = height / 2 + ring * Math.sin(angle);
    });
    const byId = new Map(nodes.map((node) => [node.id, node]));
    const links = edges.map((e) => [byId.get(e.source), byId.get(e.target)]).filter((l) => l[0] && l[1]);
    let step = Math.min(width, height) / 10;
    for (let round = 0; round < 250; round += 1) {
      nodes.forEach((node) => { node.dx = 0; node.dy = 0; });
      for (let i = 0; i < nodes.length; i += 1) {
        for (let j = i + 1; j < nodes.length; j += 1) {
          const a = nodes[i], b = nodes[j];
          let dx = a.x - b.x, dy = a.y - b.y;
          const distance = Math.max(0.01, Math.hypot(dx, dy));
          const force = (k * k) / distance;
          dx = (dx / distance) * force; dy = (dy / distance) * force;
          a.dx += dx; a.dy += dy; b.dx -= dx; b.dy -= dy;
        }
      }
      links.forEach(([a, b]) => {
        const dx = a.x - b.x, dy = a.y - b.y;
        const distance = Math.max(0.01, Math.hypot(dx, dy));
        const force = (distance * distance) / k;
        const fx = (dx / distance) * force, fy = (dy / distance) * force;
        a.dx -= fx; a.dy -= fy; b.dx += fx; b.dy += fy;
      });
      nodes.forEach((node) => {
        node.dx += (width / 2 - node.x) * 0.012 * k;
        node.dy += (height / 2 - node.y) * 0.012 * k;
        const length = Math.max(0.01, Math.hypot(node.dx, node.dy));
        node.x += (node.dx / length) * Math.min(length, step);
        node.y += (node.dy / length) * Math.min(length, step);
        const r = radius(node) + 2;
        node.x = Math.min(width - r, Math.max(r, node.x));
        node.y = Math.min(height - r, Math.max(r, node.y));
      });
      step *= 0.97;
    }
    return links;
  }

  function draw(nodes, links) {
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.strokeStyle = "rgba(90, 100, 120, 0.35)";
    links.forEach(([a, b]) => {
      context.beginPath(); context.moveTo(a.x, a.y); context.lineTo(b.x, b.y); context.stroke();
    });
    nodes.forEach((node) => {
      context.beginPath();
      context.fillStyle = colour(node.community);
      context.arc(node.x, node.y, radius(node), 0, 2 * Math.PI);
      context.fill();
    });
    context.fillStyle = "#1d2430";
    context.font = "11px system-ui, sans-serif";
    const labelled = [...nodes].sort((a, b) => b.degree - a.degree).slice(0, 40);
    labelled.forEach((node) => {
      const label = node.label.slice(0, 32);
      const room = context.measureText(label).width;
      const right = node.x + radius(node) + 2;
      const x = right + room > canvas.width ? node.x - radius(node) - 2 - room : right;
      context.fillText(label, x, node.y + 4);
    });
  }

  function nodeAt(nodes, event) {
    const box = canvas.getBoundingClientRect();
    const x = ((event.clientX - box.left) * canvas.width) / box.width;
    const y = ((event.clientY - box.top) * canvas.height) / box.height;
    return nodes.find((node) => Math.hypot(node.x - x, node.y - y) <= radius(node) + 2);
  }

  // the page carries its graph (a JSON data block, never run as script)
  Promise.resolve(JSON.parse(document.getElementById("graph-data").textContent))
    .then((data) => {
      const nodes = data.nodes;
      const links = layout(nodes, data.edges, canvas.width, canvas.height);
      draw(nodes, links);
      canvas.dataset.drawn = String(nodes.length);
      canvas.addEventListener("click", (event) => {
        const node = nodeAt(nodes, event);
        if (node) { window.location.href = canvas.dataset.base + "/graph/nodes/" + node.id; }
      });
      canvas.addEventListener("mousemove", (event) => {
        const node = nodeAt(nodes, event);
        hover.textContent = node
          ? node.label + " (" + node.type + ") · " + node.memories + " memories · degree " + node.degree
          : "";
      });
    })
    .catch((error) => {
      canvas.dataset.drawn = "error";
      hover.textContent = String(error.message || error);
    });
})();
