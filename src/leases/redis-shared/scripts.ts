import { LuaScript } from "../../core/lua-source.js";
import * as L from "./lua/lease-scripts.js";

/** What both stores do unless configured otherwise, and how much one script call takes on. */
export const DEFAULTS = {
  /** How long an ended lease stays answerable (get, findNewerOverlapping): 24 h. */
  retainMs: 24 * 60 * 60 * 1000,
  /** Minimum interval between retention sweeps (run from collectExpired). */
  sweepEveryMs: 60_000,
  /** Ended leases one sweep looks at, at most. */
  sweepLimit: 500,
  /** Expired leases one collectExpired reports, at most. */
  collectLimit: 1000,
} as const;

/**
 * The scripts one Redis and each Redlock instance run as they are (same key layout, same
 * arguments), one LuaScript each. The scripts that take a token, and the release (one Redis's
 * wakes its waiters), are each store's own.
 */
export const SHARED_SCRIPTS = {
  renew: new LuaScript("renew", L.RENEW),
  collectExpired: new LuaScript("collect-expired", L.COLLECT_EXPIRED),
  sweep: new LuaScript("sweep", L.SWEEP),
  get: new LuaScript("get", L.GET),
  list: new LuaScript("list", L.LIST),
  findCovering: new LuaScript("find-covering", L.FIND_COVERING),
  findNewer: new LuaScript("find-newer", L.FIND_NEWER),
  forgetIntents: new LuaScript("forget-intents", L.FORGET_INTENTS),
  intentsUnder: new LuaScript("intents-under", L.INTENTS_UNDER),
  addDelegate: new LuaScript("add-delegate", L.ADD_DELEGATE),
  listDelegates: new LuaScript("list-delegates", L.LIST_DELEGATES),
  removeDelegate: new LuaScript("remove-delegate", L.REMOVE_DELEGATE),
};
