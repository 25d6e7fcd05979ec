// sandgate's page script. It builds no HTML: the server renders every partial, and this
// only hands what arrives on the live channel to htmx, and adds keyboard and small
// conveniences that need no markup of their own.
(() => {
  'use strict';
  const body = document.body;

  // Enter sends, Shift+Enter starts a new line (not while an IME is composing).
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    if (t instanceof HTMLTextAreaElement && t.form && t.form.hasAttribute('data-composer') && e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (t.value.trim()) t.form.requestSubmit();
    }
  });

  document.addEventListener('htmx:afterRequest', (e) => {
    const elt = e.detail.elt;
    if (elt instanceof HTMLFormElement && elt.hasAttribute('data-composer') && e.detail.successful) {
      elt.reset();
      elt.querySelector('textarea')?.focus();
    }
    if (elt instanceof HTMLFormElement && elt.id === 'upload') {
      const p = document.getElementById('upload-progress');
      if (p) p.hidden = true;
      if (e.detail.successful) elt.reset();
    }
  });

  document.addEventListener('htmx:xhr:progress', (e) => {
    const p = document.getElementById('upload-progress');
    if (!p || !(e.target instanceof HTMLFormElement) || e.target.id !== 'upload' || !e.detail.lengthComputable) return;
    p.hidden = false;
    p.value = Math.round((e.detail.loaded / e.detail.total) * 100);
  });

  document.addEventListener('click', (e) => {
    const button = e.target instanceof Element ? e.target.closest('[data-copy]') : null;
    if (!button) return;
    const source = document.querySelector(button.getAttribute('data-copy'));
    if (!source) return;
    navigator.clipboard.writeText(source.textContent || '').then(
      () => { button.textContent = 'Copied'; },
      () => { button.textContent = 'Select and copy'; },
    );
  });

  // The live channel: server-rendered partials, swapped in by htmx, in the order sent.
  if (!body.dataset.live || typeof window.io !== 'function') return;
  const socket = window.io({ auth: { csrf: body.dataset.csrf }, transports: ['websocket', 'polling'] });
  // After a reconnect, what was sent while the page was away is fetched whole (the
  // transcript as the server renders it); the first connection has the page as served.
  let connectedBefore = false;
  const watch = () => {
    const t = document.getElementById('transcript');
    const again = connectedBefore;
    connectedBefore = true;
    if (body.dataset.live === 'admin') {
      socket.emit('watch-admin', (r) => { body.dataset.liveState = r && r.ok ? 'watching' : 'refused'; });
      return;
    }
    if (!t) {
      body.dataset.liveState = 'connected';
      return;
    }
    socket.emit('watch', t.dataset.conversation, () => {
      body.dataset.liveState = 'watching';
      if (again) window.htmx.ajax('GET', `/c/${encodeURIComponent(t.dataset.conversation)}/transcript`, { target: '#transcript', swap: 'innerHTML' });
    });
  };
  socket.on('connect', watch);
  socket.on('disconnect', () => { body.dataset.liveState = 'disconnected'; });
  socket.on('connect_error', (err) => {
    if (/unauthorized/.test(String(err && err.message))) socket.disconnect();
  });
  socket.on('swap', (m) => {
    let target = document.querySelector(m.target);
    let html = m.html;
    let swap = m.swap;
    if (!target && m.fallback) {
      target = document.querySelector(m.fallback.target);
      html = m.fallback.html;
      swap = m.fallback.swap;
    }
    if (!target) return;
    window.htmx.swap(target, html, { swapStyle: swap });
    const transcript = document.getElementById('transcript');
    if (transcript && transcript.contains(target)) transcript.lastElementChild?.scrollIntoView({ block: 'end' });
  });
  socket.on('trigger', (m) => {
    if (m && typeof m.event === 'string') window.htmx.trigger(body, m.event);
  });
})();
