// qmoe's error types. Every message names the file, tensor or config key at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace qmoe {

// Malformed or inconsistent input (checkpoint, config, shapes, values) and rejected schemes.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Valid input that qmoe does not handle (yet). Kept distinct so callers can tell the two apart.
class NotSupported : public Error {
 public:
  using Error::Error;
};

}  // namespace qmoe
