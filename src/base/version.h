// The version of rota this binary is: the CLI prints it (`rota version`)
// and a server announces it on /healthz (header Rota-Version), so that a
// client can say which server it talks to.
#pragma once

namespace rota {

inline constexpr const char* kVersion = "0.2.0";

}  // namespace rota
