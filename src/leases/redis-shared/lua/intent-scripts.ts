import { luaFiles } from "../../../core/lua-source.js";
import { PRELUDE } from "./prelude.js";

const lua = luaFiles(import.meta.url);

/**
 * The two halves of a begin-commit script that one Redis and each Redlock instance share:
 * `intent_refusal` answers the refusal of a write (nil when it may go on: no active lease covers
 * an unfenced write's key, a fenced write's lease is current), `file_intent` records the intent by
 * object, so that a grant finds the intents under its resource without reading others.
 * `put_intent` is the record itself, also used by the Redlock repair to copy intents onto an
 * instance that lost them.
 */
export const INTENT_STEPS = lua("intent-steps.lua");

/** ARGV[3..5]: kind ('k' | 'p'), bucket, key or prefix. Answers (id, bucket, key) triples. */
export const INTENTS_UNDER = lua("intents-under.lua", { PRELUDE });

/** ARGV[3..]: intent ids; unknown ones are ignored (endCommit and clearIntents alike). */
export const FORGET_INTENTS = lua("forget-intents.lua", { PRELUDE });
