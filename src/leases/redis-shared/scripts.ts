import { LuaScript } from "../../core/lua-source.js";
import { ADD_DELEGATE, LIST_DELEGATES, REMOVE_DELEGATE } from "./lua/delegate-scripts.js";
import { FORGET_INTENTS, INTENTS_UNDER } from "./lua/intent-scripts.js";
import { COLLECT_EXPIRED, FIND_COVERING, FIND_NEWER, GET, LIST, RENEW, SWEEP } from "./lua/lease-scripts.js";

/**
 * The scripts one Redis and each Redlock instance run as they are (same key layout, same
 * arguments), one LuaScript each. The scripts that take a token, and the release (one Redis's
 * wakes its waiters), are each store's own.
 */
export const SHARED_SCRIPTS = {
  renew: new LuaScript("renew", RENEW),
  collectExpired: new LuaScript("collect-expired", COLLECT_EXPIRED),
  sweep: new LuaScript("sweep", SWEEP),
  get: new LuaScript("get", GET),
  list: new LuaScript("list", LIST),
  findCovering: new LuaScript("find-covering", FIND_COVERING),
  findNewer: new LuaScript("find-newer", FIND_NEWER),
  forgetIntents: new LuaScript("forget-intents", FORGET_INTENTS),
  intentsUnder: new LuaScript("intents-under", INTENTS_UNDER),
  addDelegate: new LuaScript("add-delegate", ADD_DELEGATE),
  listDelegates: new LuaScript("list-delegates", LIST_DELEGATES),
  removeDelegate: new LuaScript("remove-delegate", REMOVE_DELEGATE),
};
