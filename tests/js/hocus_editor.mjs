// A scripted Hocuspocus (v4) editor: ONE HocuspocusProviderWebsocket shared by one
// HocuspocusProvider per document. Driven by JSON lines on stdin (see editor_common.mjs).
//
//   node js/hocus_editor.mjs --url ws://127.0.0.1:PORT/ws --token T --docs a,b
//        [--name Alice] [--trace] [--session-awareness]

import { HocuspocusProvider, HocuspocusProviderWebsocket } from '@hocuspocus/provider'
import { createDecoder, readVarString, readVarUint } from 'lib0/decoding'
import WebSocket from 'ws'
import * as Y from 'yjs'

import {
  applyTextCommand, awarenessList, emit, emitError, exitClean, fatal, installCrashHandlers,
  parseArgs, runCommandLoop, textFields, tracingWebSocket, waitClosed, watchAwareness, watchText
} from './editor_common.mjs'

installCrashHandlers()

const opts = parseArgs(process.argv.slice(2), {
  url: '',
  token: '',
  docs: '',
  name: '',
  trace: false,
  'session-awareness': false,
  // Big documents: text events carry length and SHA-256 instead of the text.
  summary: false
})
if (!opts.url) fatal('--url is required')
const docNames = opts.docs.split(',').map((s) => s.trim()).filter(Boolean)
if (docNames.length === 0) fatal('--docs is required (comma separated)')

/** Decode a Hocuspocus frame header for tracing: name, type (Ping/Pong are 1 byte). */
function describeFrame (bytes) {
  if (bytes.length === 1) return { type: bytes[0] }
  try {
    const dec = createDecoder(bytes)
    const name = readVarString(dec)
    const type = readVarUint(dec)
    return { name, type }
  } catch {
    return {}
  }
}

const socket = new HocuspocusProviderWebsocket({
  url: opts.url,
  WebSocketPolyfill: opts.trace ? tracingWebSocket(describeFrame) : WebSocket,
  // Keep reconnects quick and deterministic for tests.
  delay: 100,
  minDelay: 100,
  maxDelay: 1000,
  jitter: false
})

socket.on('status', ({ status }) => emit({ event: 'status', status }))
socket.on('close', ({ event }) => {
  emit({ event: 'close', code: event?.code ?? null, reason: event?.reason ?? '' })
})
socket.on('maxAttemptsFailed', ({ error }) => {
  emit({ event: 'connection-error', message: String(error) })
})

/** @type {Map<string, {provider: HocuspocusProvider, ydoc: Y.Doc, ytext: Y.Text}>} */
const docs = new Map()

for (const name of docNames) {
  const ydoc = new Y.Doc()
  const ytext = ydoc.getText('content')
  const provider = new HocuspocusProvider({
    websocketProvider: socket,
    name,
    token: opts.token,
    document: ydoc,
    sessionAwareness: opts['session-awareness']
  })
  provider.on('synced', ({ state }) => {
    emit({ event: 'synced', doc: name, state, ...textFields(ytext, opts.summary) })
  })
  provider.on('unsyncedChanges', ({ number }) => emit({ event: 'unsynced', doc: name, n: number }))
  provider.on('authenticated', ({ scope }) => emit({ event: 'authenticated', doc: name, scope }))
  provider.on('authenticationFailed', ({ reason }) => emit({ event: 'denied', doc: name, reason }))
  provider.on('stateless', ({ payload }) => emit({ event: 'stateless', doc: name, payload }))
  // A server-sent Close (type 7) for this document: `varString(reason)` after the header.
  provider.on('message', ({ message }) => {
    try {
      message.readVarString()
      if (message.readVarUint() === 7) {
        emit({ event: 'close', doc: name, code: 1000, reason: message.readVarString() })
      }
    } catch (err) {
      emitError(err, { doc: name, where: 'peek' })
    }
  })
  watchText(name, ytext, opts.summary)
  watchAwareness(name, provider.awareness)
  if (opts.name) provider.awareness.setLocalStateField('user', { name: opts.name })
  // With an external websocketProvider, 4.x does NOT attach by itself: nothing is sent
  // until attach() (which also triggers onOpen -> token, step1, awareness if already open).
  provider.attach()
  docs.set(name, { provider, ydoc, ytext })
}

function getDoc (cmd) {
  const name = cmd.doc ?? (docs.size === 1 ? docNames[0] : undefined)
  const entry = docs.get(name)
  if (!entry) throw new Error(`unknown doc ${JSON.stringify(cmd.doc)}`)
  return [name, entry]
}

runCommandLoop({
  insert (cmd) { applyTextCommand(getDoc(cmd)[1].ytext, cmd) },
  delete (cmd) { applyTextCommand(getDoc(cmd)[1].ytext, cmd) },
  text (cmd) {
    const [name, { ytext }] = getDoc(cmd)
    emit({ event: 'text', doc: name, text: ytext.toString(), reply: true })
  },
  awareness (cmd) {
    getDoc(cmd)[1].provider.awareness.setLocalState(cmd.state ?? null)
  },
  stateless (cmd) {
    const payload = typeof cmd.payload === 'string' ? cmd.payload : JSON.stringify(cmd.payload)
    getDoc(cmd)[1].provider.sendStateless(payload)
  },
  state (cmd) {
    const [name, { provider, ydoc, ytext }] = getDoc(cmd)
    emit({
      event: 'state',
      doc: name,
      text: ytext.toString(),
      synced: provider.isSynced,
      unsynced: provider.unsyncedChanges,
      authenticated: provider.isAuthenticated,
      scope: provider.authorizedScope ?? null,
      attached: provider.isAttached,
      clientID: ydoc.clientID,
      status: socket.status,
      awareness: awarenessList(provider.awareness)
    })
  },
  ping (cmd) { emit({ event: 'pong', id: cmd.id ?? null }) },
  disconnect () { socket.disconnect() },
  async connect () { socket.connect() },
  // Per-document detach/attach on the shared socket (detach sends a Close frame).
  detach (cmd) { getDoc(cmd)[1].provider.detach() },
  attach (cmd) { getDoc(cmd)[1].provider.attach() },
  async quit () {
    const ws = socket.webSocket
    for (const { provider } of docs.values()) {
      try {
        provider.destroy()
      } catch (err) {
        emitError(err, { where: 'destroy' })
      }
    }
    socket.destroy()
    await waitClosed([ws])
    exitClean()
  }
})

emit({
  event: 'ready',
  docs: docNames,
  clientIDs: Object.fromEntries([...docs].map(([n, { ydoc }]) => [n, ydoc.clientID]))
})
