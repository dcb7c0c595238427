// `tether bench sync --driver js`: editors built on the `yjs` library, as browsers run them,
// each on its own WebSocket speaking Hocuspocus frames (document name, message type, body).
// Each editor types into its Y.Doc's Y.Text "content"; the updates Yjs emits are what is sent,
// and what arrives is applied with Y.applyUpdate, as a provider does. All editors share this
// process's clock, so a fan-out latency is the time from an editor's keystroke to another
// editor receiving that edit; an ack latency is the time to the server's SyncStatus (tether).
//
// argv[2]: JSON {url, token, editors, docs, rate, duration, warmup, seed}. Stdout: JSON lines
// {"event": "synced"}, {"event": "typing"}, {"event": "typed"}, then the results. With a
// warmup, editors type that many seconds before "typing"; those edits, their fan-out and their
// acks are not counted.
import * as Y from 'yjs'
import * as encoding from 'lib0/encoding'
import * as decoding from 'lib0/decoding'
import WebSocket from 'ws'

const SYNC = 0, AUTH = 2, SYNC_STATUS = 8, PING = 9, PONG = 10
const STEP1 = 0, STEP2 = 1, UPDATE = 2
const cfg = JSON.parse(process.argv[2])
const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const sentAt = new Map() // "client:clock" of an edit -> when it was typed
const fanout = [], acks = [], errors = []
let sent = 0, rejected = 0, duplicates = 0
let measureFrom = 0 // performance.now() from which edits count (after the warm-up)
let seed = cfg.seed || 1
const random = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 }

function editKey (update) {
  const d = decoding.createDecoder(update)
  if (decoding.readVarUint(d) === 0) return null
  decoding.readVarUint(d) // structs of the first client
  return decoding.readVarUint(d) + ':' + decoding.readVarUint(d)
}

function frame (name, type, write) {
  const e = encoding.createEncoder()
  encoding.writeVarString(e, name)
  encoding.writeVarUint(e, type)
  write(e)
  return encoding.toUint8Array(e)
}

class Editor {
  constructor (index) {
    this.name = 'bench-' + (index % cfg.docs)
    this.doc = new Y.Doc()
    this.text = this.doc.getText('content')
    this.pending = [] // send times of updates awaiting their SyncStatus (null: a step2)
    this.seen = new Set()
    this.synced = false
    this.doc.on('update', (update, origin) => {
      if (origin === 'remote') return
      const now = performance.now()
      const key = editKey(update)
      if (key !== null) sentAt.set(key, now)
      if (now >= measureFrom) sent++
      this.pending.push(now)
      this.send(frame(this.name, SYNC, (e) => { encoding.writeVarUint(e, UPDATE); encoding.writeVarUint8Array(e, update) }))
    })
  }

  connect () {
    return new Promise((resolve, reject) => {
      this.ws = new WebSocket(cfg.url, { perMessageDeflate: false })
      this.ws.binaryType = 'arraybuffer'
      this.ws.on('open', () => {
        this.send(frame(this.name, AUTH, (e) => { encoding.writeVarUint(e, 0); encoding.writeVarString(e, cfg.token); encoding.writeVarString(e, 'bench-js') }))
        this.send(frame(this.name, SYNC, (e) => { encoding.writeVarUint(e, STEP1); encoding.writeVarUint8Array(e, Y.encodeStateVector(this.doc)) }))
        resolve()
      })
      this.ws.on('error', (err) => { errors.push(String(err)); reject(err) })
      this.ws.on('message', (data) => this.receive(new Uint8Array(data)))
    })
  }

  send (bytes) {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(bytes)
  }

  receive (data) {
    const now = performance.now()
    if (data.length === 1 && data[0] === PING) { this.ws.send(Uint8Array.of(PONG)); return }
    const d = decoding.createDecoder(data)
    decoding.readVarString(d)
    const type = decoding.readVarUint(d)
    if (type === SYNC) {
      const kind = decoding.readVarUint(d)
      const payload = decoding.readVarUint8Array(d)
      if (kind === STEP1) {
        this.pending.push(null)
        const reply = Y.encodeStateAsUpdate(this.doc, payload)
        this.send(frame(this.name, SYNC, (e) => { encoding.writeVarUint(e, STEP2); encoding.writeVarUint8Array(e, reply) }))
        return
      }
      if (kind === UPDATE) {
        const key = editKey(payload)
        const at = key === null ? undefined : sentAt.get(key)
        if (at !== undefined && at >= measureFrom && !key.startsWith(this.doc.clientID + ':')) {
          if (this.seen.has(key)) duplicates++
          else { this.seen.add(key); fanout.push(now - at) }
        }
      }
      Y.applyUpdate(this.doc, payload, 'remote')
      if (kind === STEP2) this.synced = true
    } else if (type === SYNC_STATUS) {
      const applied = decoding.readVarUint(d) === 1
      const at = this.pending.shift()
      const measured = at !== undefined && at !== null && at >= measureFrom
      if (measured) acks.push(now - at)
      if (!applied && (at === null || at === undefined || measured)) rejected++
    }
  }

  typeOne () {
    const chars = 'abcdefghijklmnopqrstuvwxyz '
    this.text.insert(this.text.length, chars[Math.floor(random() * chars.length)])
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function main () {
  const editors = Array.from({ length: cfg.editors }, (_, i) => new Editor(i))
  for (let i = 0; i < editors.length; i += 50) { // in waves: no SYN flood on loopback
    await Promise.all(editors.slice(i, i + 50).map((e) => e.connect()))
  }
  const syncDeadline = performance.now() + 60000
  while (editors.some((e) => !e.synced) && performance.now() < syncDeadline) await sleep(20)
  say({ event: 'synced', all: editors.every((e) => e.synced) })
  const interval = 1000 / cfg.rate
  const warmup = (cfg.warmup || 0) * 1000
  measureFrom = performance.now() + warmup
  const started = measureFrom
  const end = started + cfg.duration * 1000
  if (warmup > 0) setTimeout(() => say({ event: 'typing' }), warmup)
  else say({ event: 'typing' })
  await Promise.all(editors.map(async (editor) => {
    let next = started - warmup + random() * interval
    while (next < end) {
      const delay = next - performance.now()
      if (delay > 0) await sleep(delay)
      editor.typeOne()
      next += interval
    }
  }))
  const typed = (performance.now() - started) / 1000
  const settle = performance.now() + 10000 // in-flight acks and fan-out, bounded
  while (performance.now() < settle && editors.some((e) => e.pending.length > 0 && cfg.acks)) await sleep(50)
  await sleep(cfg.acks ? 0 : 500)
  say({ event: 'typed' })
  for (const e of editors) e.ws.close()
  say({ event: 'results', sent, typed, fanout, acks, rejected, duplicates, errors: errors.slice(0, 20), errorCount: errors.length })
}

main().catch((err) => { say({ event: 'results', sent, typed: 0, fanout, acks, rejected, duplicates, errors: [String(err)], errorCount: 1 }); process.exit(0) })
