// record.spec.mjs: headless Chromium (Debian's, through playwright-core) opens web/test-record.html
// served by tracegated, which records a short track_event trace over ws://HOST/traced with the
// Perfetto UI's framing and downloads it; the download must be a valid, non-empty trace whose
// packets all parse (and, with a producer running, hold TrackEvent data).
// Usage: node record.spec.mjs BASE_URL [--want-track-events]   (run by tests/browser/run.sh)
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { chromium } from 'playwright-core';

const base = process.argv[2];
// waits are safety nets, scaled like every test deadline (TG_TEST_TIMEOUT_SCALE, default 4)
const scale = Number(process.env.TG_TEST_TIMEOUT_SCALE) > 0 ? Number(process.env.TG_TEST_TIMEOUT_SCALE) : 4;
const WAIT_MS = Math.round(90000 * scale);
const wantTrackEvents = process.argv.includes('--want-track-events');
if (!base) {
  console.error('usage: node record.spec.mjs BASE_URL [--want-track-events]');
  process.exit(2);
}

// ---- a tiny protobuf walker: every field must parse; returns {field: [values]} ----
function decode(u8) {
  const out = {};
  let i = 0;
  const varint = () => {
    let r = 0n, s = 0n, x;
    do {
      if (i >= u8.length) throw new Error('truncated varint');
      x = u8[i++];
      r |= BigInt(x & 0x7f) << s;
      s += 7n;
    } while (x & 0x80);
    return r;
  };
  while (i < u8.length) {
    const key = Number(varint()), f = key >> 3, wt = key & 7;
    if (f === 0) throw new Error('field number 0');
    let v;
    if (wt === 0) v = varint();
    else if (wt === 2) {
      const n = Number(varint());
      if (i + n > u8.length) throw new Error('truncated length-delimited field');
      v = u8.subarray(i, i + n);
      i += n;
    } else if (wt === 1) { if (i + 8 > u8.length) throw new Error('truncated fixed64'); v = u8.subarray(i, i + 8); i += 8; }
    else if (wt === 5) { if (i + 4 > u8.length) throw new Error('truncated fixed32'); v = u8.subarray(i, i + 4); i += 4; }
    else throw new Error('bad wire type ' + wt);
    (out[f] = out[f] || []).push(v);
  }
  return out;
}

const results = { passed: 0, failed: 0 };
async function check(name, fn) {
  try {
    await fn();
    results.passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    results.failed++;
    console.log(`not ok - ${name}: ${e.stack || e}`);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  timeout: WAIT_MS,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const context = await browser.newContext({ acceptDownloads: true });
  context.setDefaultTimeout(WAIT_MS);
  context.setDefaultNavigationTimeout(WAIT_MS);
  const page = await context.newPage();
  page.on('console', (m) => console.log(`[page] ${m.text()}`));

  let trace;
  await check('the page records a trace over /traced and downloads it', async () => {
    const download = page.waitForEvent('download', { timeout: WAIT_MS });
    await page.goto(`${base}/test-record.html?duration=2000`);
    const failed = page.waitForFunction(() => window.__tgResult && window.__tgResult.error, null, { timeout: WAIT_MS })
      .then(async () => { throw new Error(await page.evaluate(() => window.__tgResult.error)); });
    const dl = await Promise.race([download, failed]);
    assert.equal(dl.suggestedFilename(), 'tracegate-test.pftrace');
    trace = new Uint8Array(await readFile(await dl.path()));
    assert.ok(trace.length > 0, 'the trace is empty');
  });

  await check('the download is a valid trace whose packets parse', async () => {
    assert.ok(trace, 'no trace downloaded');
    const top = decode(trace);
    const fields = Object.keys(top);
    assert.deepEqual(fields, ['1'], `a Trace holds only packets (field 1), got ${fields}`);
    const packets = top[1];
    assert.ok(packets.length > 0, 'no packets');
    let trackEvents = 0, withSequence = 0;
    for (const p of packets) {
      const pkt = decode(p);                       // throws if a packet does not parse
      if (pkt[11]) { trackEvents++; decode(pkt[11][0]); } // TracePacket.track_event
      if (pkt[10]) withSequence++;                 // trusted_packet_sequence_id
    }
    console.log(`# ${packets.length} packets, ${trackEvents} track events, ${trace.length} bytes`);
    if (wantTrackEvents) assert.ok(trackEvents > 0, 'no TrackEvent packets (was a producer running?)');
  });

  await check('a page from a foreign origin cannot open /traced', async () => {
    // a data: URL has Origin "null": not on the allow-list
    const p2 = await context.newPage();
    await p2.goto('about:blank');
    const r = await p2.evaluate((u) => new Promise((res) => {
      const w = new WebSocket(u);
      w.onopen = () => { w.close(); res('open'); };
      w.onerror = () => res('refused');
    }), base.replace(/^http/, 'ws') + '/traced');
    assert.equal(r, 'refused');
    await p2.close();
  });
} finally {
  await browser.close();
}
console.log(`${results.passed} passed, ${results.failed} failed`);
process.exit(results.failed ? 1 : 0);
