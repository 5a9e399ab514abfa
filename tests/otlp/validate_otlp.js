// validate_otlp.js: checks OTLP/JSON trace export requests (one ExportTraceServiceRequest per
// line, files given as arguments) against the OpenTelemetry JS project's own generated OTLP
// message definitions (@opentelemetry/otlp-transformer's protobufjs root): ids must be lower-case
// hex of the right length (the OTLP JSON encoding), the message must convert with fromObject,
// verify, encode and decode, and the decoded message must carry every field of the input, so a
// misspelt or unknown key (which fromObject would silently drop) fails. Prints
// "N requests, M spans" on success; exits 1 with the reason otherwise.
'use strict';
const fs = require('fs');
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root');
const Req = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

const ID_LEN = { traceId: 32, spanId: 16, parentSpanId: 16 };

function fail(msg) {
  console.error('validate_otlp: ' + msg);
  process.exit(1);
}

// hex ids -> Buffer (protobufjs' bytes), checked on the way
function toProto(v, where) {
  if (Array.isArray(v)) return v.map((x, i) => toProto(x, where + '[' + i + ']'));
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) {
      if (k in ID_LEN) {
        const re = new RegExp('^[0-9a-f]{' + ID_LEN[k] + '}$');
        if (typeof x !== 'string' || !re.test(x)) fail(where + '.' + k + ' is not ' + ID_LEN[k] + ' lower-case hex: ' + x);
        o[k] = Buffer.from(x, 'hex');
      } else {
        o[k] = toProto(x, where + '.' + k);
      }
    }
    return o;
  }
  return v;
}

function isDefault(x) {
  return x === 0 || x === '0' || x === '' || x === false || (Array.isArray(x) && x.length === 0);
}

// every field of a (the input) is in b (decoded) with the same value; b has nothing a lacks
function same(a, b, where) {
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) fail(where + ': array length differs');
    a.forEach((x, i) => same(x, b[i], where + '[' + i + ']'));
    return;
  }
  if (a && typeof a === 'object') {
    if (!b || typeof b !== 'object') fail(where + ': not an object after the round trip');
    for (const [k, x] of Object.entries(a)) {
      if (!(k in b)) {
        if (isDefault(x)) continue;
        fail(where + '.' + k + ' is not a field of the OTLP message (dropped by fromObject)');
      }
      if (k in ID_LEN) {
        if (Buffer.from(b[k], 'base64').toString('hex') !== x) fail(where + '.' + k + ' changed');
        continue;
      }
      same(x, b[k], where + '.' + k);
    }
    for (const k of Object.keys(b)) if (!(k in a)) fail(where + '.' + k + ' appeared from nowhere');
    return;
  }
  const na = typeof a === 'number' && isNaN(a), sa = String(a), sb = String(b);
  if (na || (typeof a === 'string' && /^-?(Infinity|NaN)$/.test(a))) {
    if (!(sb === sa || (isNaN(Number(sb)) && isNaN(Number(sa))))) fail(where + ': ' + sa + ' became ' + sb);
    return;
  }
  if (typeof a === 'number' && typeof b === 'number') {
    if (a !== b) fail(where + ': ' + sa + ' became ' + sb);
    return;
  }
  if (sa !== sb) fail(where + ': ' + sa + ' became ' + sb);
}

let requests = 0, spans = 0;
for (const file of process.argv.slice(2)) {
  const lines = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.length);
  lines.forEach((line, n) => {
    const where = file + ':' + (n + 1);
    let obj;
    try {
      obj = JSON.parse(line);
    } catch (e) {
      fail(where + ': not JSON: ' + e.message);
    }
    if (!Array.isArray(obj.resourceSpans) || obj.resourceSpans.length === 0) fail(where + ': no resourceSpans');
    const msg = Req.fromObject(toProto(obj, where));
    const err = Req.verify(msg);
    if (err) fail(where + ': ' + err);
    const back = Req.decode(Req.encode(msg).finish());
    same(obj, Req.toObject(back, { longs: String, enums: Number, bytes: String }), where);
    requests++;
    for (const rs of back.resourceSpans) for (const ss of rs.scopeSpans) spans += ss.spans.length;
  });
}
console.log(requests + ' requests, ' + spans + ' spans');
