import { luaFiles } from "../../../core/lua-source.js";
import { PRELUDE } from "./prelude.js";

const lua = luaFiles(import.meta.url);

/**
 * A lease's delegates (LeaseStore.addDelegate and friends): `P:dlg` every delegate by creation
 * order (a sequence from `P:dlgseq`), member `<lease id> <delegate id>`; `P:dlgl:<lease id>`
 * one lease's delegates, same order; `P:dlgr` the records (JSON) by member. Retention's sweep
 * forgets them with their lease (SWEEP calls forget_delegates).
 */

/** ARGV[3..6]: lease id, delegate id, created by, created at. Answers 'ok' or 'notfound'. */
export const ADD_DELEGATE = lua("add-delegate.lua", { PRELUDE });

/** ARGV[3]: lease id, '' for every lease. Answers the records (JSON) in creation order. */
export const LIST_DELEGATES = lua("list-delegates.lua", { PRELUDE });

/** ARGV[3..4]: lease id, delegate id. Answers 1 when removed, 0 when the lease had no such delegate. */
export const REMOVE_DELEGATE = lua("remove-delegate.lua", { PRELUDE });
