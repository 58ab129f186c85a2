import { DomainError } from "../../core/errors.js";

export const closed = () => new DomainError("ServiceUnavailable", "the memory backend is closed");
