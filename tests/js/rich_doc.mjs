// Rich documents as Tiptap writes and reads them, through Tiptap's StarterKit schema and
// y-prosemirror, the real libraries a Tiptap + Hocuspocus app runs in the browser.
//   node rich_doc.mjs [field]          ProseMirror JSON on stdin -> a Yjs update (base64)
//   node rich_doc.mjs --read [field]   a Yjs update (base64) on stdin -> the ProseMirror JSON
//                                      of the field, checked against the schema (exit 1 if not)
import * as Y from 'yjs'
import { getSchema } from '@tiptap/core'
import StarterKit from '@tiptap/starter-kit'
import { prosemirrorJSONToYDoc, yXmlFragmentToProseMirrorRootNode } from 'y-prosemirror'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const input = Buffer.concat(chunks).toString('utf8')
const schema = getSchema([StarterKit])
if (process.argv[2] === '--read') {
  const ydoc = new Y.Doc()
  Y.applyUpdate(ydoc, Buffer.from(input, 'base64'))
  const node = yXmlFragmentToProseMirrorRootNode(ydoc.getXmlFragment(process.argv[3] || 'default'), schema)
  node.check() // throws on content the schema does not allow
  process.stdout.write(JSON.stringify(node.toJSON()))
} else {
  const ydoc = prosemirrorJSONToYDoc(schema, JSON.parse(input), process.argv[2] || 'default')
  process.stdout.write(Buffer.from(Y.encodeStateAsUpdate(ydoc)).toString('base64'))
}
