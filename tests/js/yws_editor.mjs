// A scripted y-websocket (3.x) editor. Driven by JSON lines on stdin (see editor_common.mjs).
//
//   node js/yws_editor.mjs --url ws://127.0.0.1:PORT/yjs --doc NAME [--token T] [--name Bob]
//        [--trace]
//
// y-websocket connects to `url + '/' + doc + '?token=T'`. `--doc a,b` opens one provider (and
// so one socket) per document.

import { createDecoder, readVarString, readVarUint } from 'lib0/decoding'
import WebSocket from 'ws'
import { WebsocketProvider } from 'y-websocket'
import * as Y from 'yjs'

import {
  applyTextCommand, awarenessList, emit, emitError, exitClean, fatal, installCrashHandlers,
  parseArgs, runCommandLoop, textFields, tracingWebSocket, waitClosed, watchAwareness, watchText
} from './editor_common.mjs'

installCrashHandlers()

const opts = parseArgs(process.argv.slice(2), {
  url: '',
  doc: '',
  token: '',
  name: '',
  trace: false,
  // Big documents: text events carry length and SHA-256 instead of the text.
  summary: false
})
if (!opts.url) fatal('--url is required')
const docNames = opts.doc.split(',').map((s) => s.trim()).filter(Boolean)
if (docNames.length === 0) fatal('--doc is required')

function describeFrame (bytes) {
  return bytes.length ? { type: bytes[0] } : {}
}

const messageAuth = 2

/** @type {Map<string, {provider: WebsocketProvider, ydoc: Y.Doc, ytext: Y.Text}>} */
const docs = new Map()

for (const name of docNames) {
  const ydoc = new Y.Doc()
  const ytext = ydoc.getText('content')
  const params = opts.token ? { token: opts.token } : {}
  const provider = new WebsocketProvider(opts.url, name, ydoc, {
    WebSocketPolyfill: opts.trace ? tracingWebSocket(describeFrame) : WebSocket,
    disableBc: true,
    params,
    maxBackoffTime: 1000
  })
  // y-websocket only console.warns a permission-denied auth message: make it an event.
  // Auth message body: varUint(0 = permission denied) varString(reason).
  provider.messageHandlers[messageAuth] = (_encoder, decoder) => {
    const kind = readVarUint(decoder)
    if (kind === 0) emit({ event: 'denied', doc: name, reason: readVarString(decoder) })
    else emit({ event: 'auth', doc: name, kind })
  }
  provider.on('status', ({ status }) => emit({ event: 'status', doc: name, status }))
  provider.on('sync', (state) => {
    if (state) emit({ event: 'synced', doc: name, state, ...textFields(ytext, opts.summary) })
  })
  provider.on('connection-close', (event) => {
    emit({ event: 'close', doc: name, code: event?.code ?? null, reason: event?.reason ?? '' })
  })
  provider.on('connection-error', (event) => {
    emit({ event: 'connection-error', doc: name, message: String(event?.message ?? event?.error ?? event) })
  })
  watchText(name, ytext, opts.summary)
  watchAwareness(name, provider.awareness)
  if (opts.name) provider.awareness.setLocalStateField('user', { name: opts.name })
  docs.set(name, { provider, ydoc, ytext })
}

function getDoc (cmd) {
  const name = cmd.doc ?? (docs.size === 1 ? docNames[0] : undefined)
  const entry = docs.get(name)
  if (!entry) throw new Error(`unknown doc ${JSON.stringify(cmd.doc)}`)
  return [name, entry]
}

function selected (cmd) {
  return cmd.doc === undefined ? [...docs.values()] : [getDoc(cmd)[1]]
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
  state (cmd) {
    const [name, { provider, ydoc, ytext }] = getDoc(cmd)
    emit({
      event: 'state',
      doc: name,
      text: ytext.toString(),
      synced: provider.synced,
      connected: provider.wsconnected,
      clientID: ydoc.clientID,
      url: provider.url,
      awareness: awarenessList(provider.awareness)
    })
  },
  ping (cmd) { emit({ event: 'pong', id: cmd.id ?? null }) },
  disconnect (cmd) { for (const { provider } of selected(cmd)) provider.disconnect() },
  connect (cmd) { for (const { provider } of selected(cmd)) provider.connect() },
  async quit () {
    const sockets = [...docs.values()].map(({ provider }) => provider.ws)
    for (const { provider } of docs.values()) {
      try {
        // Tell peers we are gone (y-websocket's disconnect() does this), then tear down.
        provider.destroy()
      } catch (err) {
        emitError(err, { where: 'destroy' })
      }
    }
    await waitClosed(sockets)
    exitClean()
  }
})

emit({
  event: 'ready',
  docs: docNames,
  clientIDs: Object.fromEntries([...docs].map(([n, { ydoc }]) => [n, ydoc.clientID]))
})
