// A rich document as Tiptap writes it: ProseMirror JSON (stdin) through Tiptap's StarterKit
// schema and y-prosemirror into a Y.XmlFragment (argv[2], "default" by default); prints the
// Yjs update, base64. The real libraries a Tiptap + Hocuspocus app runs in the browser.
import * as Y from 'yjs'
import { getSchema } from '@tiptap/core'
import StarterKit from '@tiptap/starter-kit'
import { prosemirrorJSONToYDoc } from 'y-prosemirror'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const json = JSON.parse(Buffer.concat(chunks).toString('utf8'))
const ydoc = prosemirrorJSONToYDoc(getSchema([StarterKit]), json, process.argv[2] || 'default')
process.stdout.write(Buffer.from(Y.encodeStateAsUpdate(ydoc)).toString('base64'))
